// The GPU engine's decode with the device selections of BinaryPC, Quest, TOPK and MagicPIG
// (DecodeSelector::device_selection run by engine/cuda/cuda_sparse_decode.h) against the CPU
// selectors (policies/binarypc.cc, quest.cc, topk.cc, magicpig.cc) and the CPU engine, on a small
// random model: at every decode step and selecting layer the GPU's lists equal what the CPU
// selector picks from the same keys (the GPU cache) and queries — MagicPIG's sampled sets too,
// exactly (both hash with f64 signs near zero), with logit biases within 1e-4 (f64 sums in the
// same order; the device's acos/pow/log against libm's); the CPU engine attending to those lists
// with those biases gives the GPU's logits within bf16 tolerance and the same greedy tokens. Steps
// after the first replay the captured decode graph; Quest's steps cross a page boundary, and with a
// budget above the prompt its page budget moves (the graph is re-captured).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "common/errors.h"
#include "engine/cpu/forward.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/presets.h"
#include "policies/binarypc_projection.h"
#include "policies/decode_selectors.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

constexpr int kPromptLength = 300;
constexpr int kSteps = 6;

ModelConfig small_config() {
  ModelConfig config = test::small_random_model("random-sparse-test", 3, 256, 64, 512, 1000);
  config.n_query_heads = 8;
  return config;
}

std::vector<int32_t> prompt_ids() { return test::strided_token_ids(kPromptLength, 37, 11, 1000); }

int argmax(const std::vector<float>& x) {
  return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
}

// One layer's lists of a step, per query head, with their logit biases (empty: none).
struct StepLists {
  std::vector<std::vector<int32_t>> indices;
  std::vector<std::vector<float>> bias;
};

// The CPU engine's decode attends to the lists the GPU used in the same step.
class ReplaySelector : public DecodeSelector {
 public:
  explicit ReplaySelector(const std::vector<StepLists>* lists) : lists_(lists) {}
  std::string name() const override { return "replay"; }
  void start(const KvStore&, int, int) override {}
  void on_append(const KvStore&, int) override {}
  void select(int layer, const float*, const KvStore&, Selection& out) override {
    const StepLists& lists = (*lists_)[layer];
    out.logit_bias.clear();
    out.dense = lists.indices.empty();
    if (out.dense) return;
    out.indices = lists.indices;
    out.logit_bias = lists.bias;
  }

 private:
  const std::vector<StepLists>* lists_;  // [layer]
};

// A list's (index, bias) pairs in index order (bias 0 where the list has none).
std::vector<std::pair<int32_t, float>> by_index(const std::vector<int32_t>& indices,
                                                const std::vector<float>& bias) {
  std::vector<std::pair<int32_t, float>> pairs;
  for (size_t i = 0; i < indices.size(); ++i)
    pairs.emplace_back(indices[i], bias.empty() ? 0.f : bias[i]);
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

// The GPU's list of one query head against the CPU selector's: the same entries, biases within
// 1e-4. Returns the GPU's entries in index order, and their biases into `bias`.
std::vector<int32_t> expect_same_list(const std::vector<int32_t>& gpu,
                                      const std::vector<float>& gpu_bias,
                                      const std::vector<int32_t>& cpu,
                                      const std::vector<float>& cpu_bias,
                                      std::vector<float>& bias) {
  EXPECT_EQ(gpu_bias.empty(), cpu_bias.empty());
  const auto got = by_index(gpu, gpu_bias), want = by_index(cpu, cpu_bias);
  std::vector<int32_t> got_indices, want_indices;
  bias.clear();
  for (const auto& [j, b] : got) {
    got_indices.push_back(j);
    if (!gpu_bias.empty()) bias.push_back(b);
  }
  for (const auto& [j, b] : want) want_indices.push_back(j);
  EXPECT_EQ(got_indices, want_indices);
  if (got.size() == want.size())
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i].second, want[i].second, 1e-4f) << "entry " << got[i].first;
  return got_indices;
}

// Keys of the GPU cache as a CPU store (values unused by the selectors: zeros).
KvStore mirror_of(const CudaEngine& gpu, const ModelConfig& c) {
  KvStore store(c.n_layers, c.n_kv_heads, c.head_dim);
  const std::vector<float> zeros(c.head_dim, 0.f);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const std::vector<float> keys = gpu.cached_keys(l, 0, h);
      for (int j = 0; j < gpu.length(l, 0, h); ++j)
        store.append_head(l, h, j, keys.data() + int64_t(j) * c.head_dim, zeros.data());
    }
  return store;
}

// BinaryPC projections fitted (Algorithm 1, online) on the GPU's prompt keys.
std::shared_ptr<BinaryProjectionSet> fit_projections(const CudaEngine& gpu, const ModelConfig& c) {
  auto set = std::make_shared<BinaryProjectionSet>(c.n_layers, c.n_kv_heads, c.head_dim);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const std::vector<float> keys = gpu.cached_keys(l, 0, h);
      BinaryProjectionFit fit;
      fit.seed = 17 + l * 131 + h;
      fit_binary_projection(keys.data(), gpu.length(l, 0, h), c.head_dim, fit,
                            set->mutable_head(l, h));
    }
  return set;
}

using SelectorFactory = std::function<std::shared_ptr<DescribedDecodeSelector>(
    const Budget&, std::shared_ptr<const BinaryProjectionSet>)>;

void check_against_cpu(const SelectorFactory& make_selector, const Budget& budget) {
  const ModelConfig c = small_config();
  auto weights = random_weights(c, 42);
  const std::vector<int32_t> prompt = prompt_ids();
  auto gpu = CudaEngine::from_weights(*weights);
  gpu->allocate_cache(1, kPromptLength + kSteps + 4);
  const std::vector<float> prefill_logits = gpu->prefill(0, prompt);

  std::shared_ptr<const BinaryProjectionSet> projection = fit_projections(*gpu, c);
  auto cpu_selector = make_selector(budget, projection);
  KvStore mirror = mirror_of(*gpu, c);
  const int budget_tokens = budget.tokens_for(kPromptLength);
  ASSERT_TRUE(cpu_selector->runs_on_device());
  std::optional<DeviceSelectionSpec> spec = cpu_selector->device_selection(c, budget_tokens);
  ASSERT_TRUE(spec.has_value());
  spec->record_queries = true;
  gpu->start_sparse_decode(*spec);
  cpu_selector->start(mirror, kPromptLength, budget_tokens);

  CpuEngine cpu(*weights);
  KvStore cpu_store(c.n_layers, c.n_kv_heads, c.head_dim);
  cpu.forward_chunk(prompt, cpu_store, CaptureRequest{}, nullptr);
  std::vector<StepLists> gpu_lists(c.n_layers);
  CachePlan replay;
  replay.selector = std::make_shared<ReplaySelector>(&gpu_lists);

  int token = argmax(prefill_logits);
  gpu->set_next_tokens({token}, {kPromptLength});
  int selecting_layers = 0, sparse_lists = 0;
  for (int step = 0; step < kSteps; ++step) {
    const int position = kPromptLength + step;
    gpu->decode_step(/*use_graph=*/step > 0);
    const std::vector<float> gpu_logits = gpu->last_logits(0);
    selecting_layers = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      gpu_lists[l] = StepLists{};
      std::vector<float> query = gpu->sparse_query(l, 0);
      const std::vector<float> zeros(c.head_dim, 0.f);
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const std::vector<float> head_keys = gpu->cached_keys(l, 0, h);
        mirror.append_head(l, h, position, head_keys.data() + int64_t(position) * c.head_dim,
                           zeros.data());
      }
      cpu_selector->on_append(mirror, l);
      if (query.empty()) continue;  // a dense layer
      ++selecting_layers;
      Selection expected;
      expected.indices.resize(c.n_query_heads);
      cpu_selector->select(l, query.data(), mirror, expected);
      ASSERT_FALSE(expected.dense);
      for (int a = 0; a < c.n_query_heads; ++a) {
        SCOPED_TRACE("step " + std::to_string(step) + " layer " + std::to_string(l) +
                     " query head " + std::to_string(a));
        const std::vector<float> no_bias;
        std::vector<float> bias;
        const std::vector<int32_t> got =
            expect_same_list(gpu->sparse_selection(l, 0, a), gpu->sparse_selection_bias(l, 0, a),
                             expected.indices[a],
                             expected.logit_bias.empty() ? no_bias : expected.logit_bias[a], bias);
        if (::testing::Test::HasFailure()) return;
        EXPECT_LE(got.size(), size_t(position + 1));
        if (got.size() < size_t(position + 1)) ++sparse_lists;
        gpu_lists[l].indices.push_back(got);
        gpu_lists[l].bias.push_back(bias);
      }
    }
    const std::vector<float> cpu_logits = cpu.decode_step(token, position, step, cpu_store, replay);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < cpu_logits.size(); ++i) {
      scale = std::max(scale, double(std::abs(cpu_logits[i])));
      worst = std::max(worst, double(std::abs(gpu_logits[i] - cpu_logits[i])));
    }
    EXPECT_LT(worst, 0.05 * scale)
        << "step " << step << ": max |diff| " << worst << " vs " << scale;
    std::vector<float> sorted = cpu_logits;
    std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
    const int gpu_token = gpu->next_tokens()[0];
    EXPECT_EQ(gpu_token, argmax(gpu_logits));
    if (sorted[0] - sorted[1] > 2 * worst) {
      EXPECT_EQ(gpu_token, argmax(cpu_logits)) << "step " << step;
    }
    token = gpu_token;  // both continue from the GPU's greedy token
  }
  EXPECT_EQ(selecting_layers, c.n_layers - 1);
  EXPECT_GT(sparse_lists, 0) << "no step selected fewer entries than the cache holds";
}

TEST(CudaSparseEngine, BinaryPcMatchesCpuSelector) {
  KVB_REQUIRE_GPU();
  check_against_cpu(
      [](const Budget& budget, std::shared_ptr<const BinaryProjectionSet> projection) {
        return make_binarypc_selector({{"dense_layers", {0}}}, budget, projection);
      },
      Budget::parse("64"));
}

TEST(CudaSparseEngine, QuestPerHeadMatchesCpuSelector) {
  KVB_REQUIRE_GPU();
  check_against_cpu(
      [](const Budget& budget, std::shared_ptr<const BinaryProjectionSet>) {
        return make_quest_selector({{"dense_layers", {0}}}, budget);
      },
      Budget::parse("64"));
}

// A budget above the prompt: the page budget grows with the cache (re-captured graph), shared
// pages over the group and the last page kept.
TEST(CudaSparseEngine, QuestSharedGrowingBudgetMatchesCpuSelector) {
  KVB_REQUIRE_GPU();
  check_against_cpu(
      [](const Budget& budget, std::shared_ptr<const BinaryProjectionSet>) {
        return make_quest_selector(
            {{"dense_layers", {0}}, {"gqa", "shared"}, {"keep_last_page", true}}, budget);
      },
      Budget::parse("512"));
}

// TOPK (the oracle): exact q.k per query head, the budget's best entries of the whole cache.
TEST(CudaSparseEngine, TopkMatchesCpuSelector) {
  KVB_REQUIRE_GPU();
  check_against_cpu(
      [](const Budget& budget, std::shared_ptr<const BinaryProjectionSet>) {
        return make_topk_selector({{"dense_layers", {0}}}, budget);
      },
      Budget::parse("48"));
}

// A fraction of the current length: k grows with the cache (int(0.33 * T): 99 up to T = 303, 100
// from T = 304), so the step budget moves inside the run and the graph is re-captured.
TEST(CudaSparseEngine, TopkFractionBudgetMatchesCpuSelector) {
  KVB_REQUIRE_GPU();
  check_against_cpu(
      [](const Budget& budget, std::shared_ptr<const BinaryProjectionSet>) {
        return make_topk_selector({{"dense_layers", {0}}}, budget);
      },
      Budget::parse("33%"));
}

// MagicPIG (LSH sampling, importance-weighted): its defaults (K 10, L 150), which sample a few
// entries of this cache, and short codes (K 3, L 16, threshold 3) that sample a good share.
TEST(CudaSparseEngine, MagicPigMatchesCpuSelector) {
  KVB_REQUIRE_GPU();
  for (const nlohmann::json& params :
       {nlohmann::json{{"dense_layers", {0}}},
        nlohmann::json{{"dense_layers", {0}}, {"K", 3}, {"L", 16}, {"threshold", 3}}}) {
    SCOPED_TRACE(params.dump());
    check_against_cpu(
        [&](const Budget& budget, std::shared_ptr<const BinaryProjectionSet>) {
          return make_magicpig_selector(params, budget);
        },
        Budget::parse("64"));
  }
}

// Two sequences with the same prompt in one batch: every step each selects what the other does and
// decodes the same tokens (slots, per-sequence lists and the batch's lengths kept apart).
TEST(CudaSparseEngine, BatchOfTwoSelectsPerSequence) {
  KVB_REQUIRE_GPU();
  const ModelConfig c = small_config();
  auto weights = random_weights(c, 42);
  const std::vector<int32_t> prompt = prompt_ids();
  auto gpu = CudaEngine::from_weights(*weights);
  gpu->allocate_cache(2, kPromptLength + kSteps + 4);
  const int token = argmax(gpu->prefill(0, prompt));
  gpu->prefill(1, prompt);
  for (const bool quest : {false, true}) {
    std::shared_ptr<const BinaryProjectionSet> projection = fit_projections(*gpu, c);
    auto selector =
        quest ? make_quest_selector({{"dense_layers", {0}}}, Budget::parse("64"))
              : make_binarypc_selector({{"dense_layers", {0}}}, Budget::parse("64"), projection);
    gpu->start_sparse_decode(*selector->device_selection(c, 64));
    const int position = gpu->length(0, 0, 0);
    gpu->set_next_tokens({token, token}, {position, position});
    for (int step = 0; step < 3; ++step) {
      gpu->decode_step(/*use_graph=*/true);
      const std::vector<int32_t> next = gpu->next_tokens();
      EXPECT_EQ(next[0], next[1]) << "step " << step;
      for (int l = 1; l < c.n_layers; ++l)
        for (int a = 0; a < c.n_query_heads; ++a) {
          const std::vector<int32_t> first = gpu->sparse_selection(l, 0, a);
          ASSERT_FALSE(first.empty());
          EXPECT_LT(first.size(), size_t(kPromptLength));
          EXPECT_EQ(gpu->sparse_selection(l, 1, a), first) << "layer " << l << " head " << a;
        }
    }
    gpu->stop_sparse_decode();
  }
}

// Online BinaryPC fits on the device. A second selection over the same prompt keys with the same
// start vectors (a sample's cells at another budget) takes the first one's rows: one fit, and the
// lists a fresh engine's own fit gives. Another prompt, or another seed, fits anew; so does any
// selection after a prefill (a latency row's cell prefills alone and pays its own fit).
TEST(CudaSparseEngine, OnlineFitIsReusedOnlyForTheSameKeysAndStartVectors) {
  KVB_REQUIRE_GPU();
  const ModelConfig c = small_config();
  auto weights = random_weights(c, 42);
  const std::vector<int32_t> prompt = prompt_ids();
  const std::vector<int32_t> other_prompt = test::strided_token_ids(kPromptLength, 53, 7, 1000);
  auto online = [&](int seed, int budget) {
    return *make_binarypc_selector({{"dense_layers", {0}}, {"seed", seed}},
                                   Budget::parse(std::to_string(budget)))
                ->device_selection(c, budget);
  };
  // Sequence `seq`'s lists (every selecting layer and query head) after one step under `spec`.
  auto lists_of = [&](CudaEngine& engine, int seq, const DeviceSelectionSpec& spec) {
    engine.start_sparse_decode(spec, seq, 1);
    engine.set_next_tokens(seq, {7}, {kPromptLength});
    engine.decode_step(seq, 1, /*use_graph=*/false);
    std::vector<std::vector<int32_t>> lists;
    for (int l = 1; l < c.n_layers; ++l)
      for (int a = 0; a < c.n_query_heads; ++a) lists.push_back(engine.sparse_selection(l, seq, a));
    engine.stop_sparse_decode();
    return lists;
  };
  auto gpu = CudaEngine::from_weights(*weights);
  gpu->allocate_cache(5, kPromptLength + 4);
  gpu->prefill(0, prompt);
  for (int seq : {1, 2, 4}) gpu->copy_sequence(0, seq);
  gpu->prefill(3, other_prompt);

  lists_of(*gpu, 1, online(5, 64));
  EXPECT_EQ(gpu->projection_fit_counts().fits, 1);
  const auto reused = lists_of(*gpu, 2, online(5, 128));
  EXPECT_EQ(gpu->projection_fit_counts().fits, 1);
  EXPECT_EQ(gpu->projection_fit_counts().reuses, 1);
  lists_of(*gpu, 3, online(5, 128));  // other keys
  EXPECT_EQ(gpu->projection_fit_counts().fits, 2);
  lists_of(*gpu, 4, online(6, 128));  // the first keys again, other start vectors
  EXPECT_EQ(gpu->projection_fit_counts().fits, 3);
  EXPECT_EQ(gpu->projection_fit_counts().reuses, 1);

  auto fresh = CudaEngine::from_weights(*weights);
  fresh->allocate_cache(2, kPromptLength + 4);
  fresh->prefill(0, prompt);
  const auto own_fit = lists_of(*fresh, 0, online(5, 128));
  EXPECT_EQ(fresh->projection_fit_counts().fits, 1);
  fresh->prefill(1, prompt);  // the same keys, but after a prefill: fitted again
  EXPECT_EQ(lists_of(*fresh, 1, online(5, 128)), own_fit);
  EXPECT_EQ(fresh->projection_fit_counts().fits, 2);
  EXPECT_EQ(fresh->projection_fit_counts().reuses, 0);
  ASSERT_EQ(reused.size(), own_fit.size());
  for (size_t i = 0; i < own_fit.size(); ++i) {
    EXPECT_LT(own_fit[i].size(), size_t(kPromptLength)) << "list " << i;
    EXPECT_EQ(reused[i], own_fit[i]) << "list " << i;
  }
}

// Selectors whose building blocks the device lacks say so before any cache exists.
TEST(CudaSparseEngine, RefusesSelectorsWithoutGpuPath) {
  auto shared_topk = make_topk_selector({{"gqa", "shared"}}, Budget::parse("64"));
  EXPECT_FALSE(shared_topk->runs_on_device());
  EXPECT_FALSE(shared_topk->device_selection(ModelConfig{}, 64).has_value());
  auto magicpig = make_magicpig_selector(nlohmann::json::object(), Budget::parse("64"));
  EXPECT_TRUE(magicpig->runs_on_device());
  EXPECT_TRUE(magicpig->device_selection(ModelConfig{}, 64).has_value());
}

}  // namespace
}  // namespace kvb
