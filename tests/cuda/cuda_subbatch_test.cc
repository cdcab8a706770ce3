// The CUDA engine's decode step over a sub-batch (CudaEngine::decode_step(first, count, ...),
// engine/cuda/cuda_decode_step.cu), and generate_cells decoding cells one after another on the
// GPU after one shared prefill (engine/batch_generation.h, batch_cells false):
// - a range of a batch stepped alone computes what an engine holding only that range computes,
//   bit for bit (the same capacity gives the same length bound, split layout and GEMV rows), while
//   the batch's other sequences keep their lengths and positions: plain attention, ART's walk and
//   every device selection (sign codes, page bounds, exact scores, LSH sampling), graph-captured
//   per range;
// - sequences decoded one at a time give the tokens of the full batched step on the same caches
//   (the layouts differ, so logits agree to bf16 rounding and tokens wherever the top two logits
//   are apart by more than that);
// - generate_cells with batch_cells false gives each cell exactly what the cell gives alone (a
//   batch and a prefill of its own), ART's walk counts included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "engine/batch_generation.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/presets.h"
#include "policies/binarypc_projection.h"
#include "policies/decode_selectors.h"
#include "policies/registry.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

constexpr int kSteps = 5;
constexpr int kVocab = 1000;

ModelConfig subbatch_config() {
  ModelConfig config = test::small_random_model("random-subbatch", 3, 256, 64, 512, kVocab);
  config.n_query_heads = 8;  // group 4, as the selection kernels take
  return config;
}

// Prompt b of a batch: distinct content; `lengths` gives each its own length.
std::vector<int32_t> prompt_of(int b, int length) {
  return test::strided_token_ids(length, 37 + 6 * b, 11 + b, kVocab);
}

int argmax(const std::vector<float>& x) {
  return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
}

// How an engine decodes: plain attention, ART's walk, or a device selection (its metadata built
// from the engine's cache, every sequence at the same length; BinaryPC's projection fitted on
// `fitted_on`'s first prompt, so that every engine codes its keys alike).
struct DecodeMethod {
  std::string name;
  std::optional<EarlyExitParams> art;
  std::function<DeviceSelectionSpec(const CudaEngine& fitted_on)> selection;
};

void start_method(CudaEngine& engine, const DecodeMethod& method, const CudaEngine& fitted_on) {
  engine.set_early_exit(method.art);
  if (method.selection) engine.start_sparse_decode(method.selection(fitted_on));
}

// BinaryPC projections fitted online on sequence 0's prompt keys.
std::shared_ptr<BinaryProjectionSet> projections_of(const CudaEngine& engine) {
  const ModelConfig& c = engine.config();
  auto set = std::make_shared<BinaryProjectionSet>(c.n_layers, c.n_kv_heads, c.head_dim);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const std::vector<float> keys = engine.cached_keys(l, 0, h);
      BinaryProjectionFit fit;
      fit.seed = 17 + l * 131 + h;
      fit_binary_projection(keys.data(), engine.length(l, 0, h), c.head_dim, fit,
                            set->mutable_head(l, h));
    }
  return set;
}

std::vector<DecodeMethod> decode_methods() {
  const nlohmann::json dense0 = {{"dense_layers", {0}}};
  std::vector<DecodeMethod> methods;
  methods.push_back({"plain", std::nullopt, nullptr});
  EarlyExitParams walk_all;  // zero thresholds: no stop, every block walked and counted
  walk_all.tau = walk_all.phi = 0.f;
  methods.push_back({"art-walk-all", walk_all, nullptr});
  methods.push_back({"art-defaults", EarlyExitParams{}, nullptr});
  auto selection =
      [](std::function<std::shared_ptr<DescribedDecodeSelector>(const CudaEngine&)> make,
         int budget) {
        return [make, budget](const CudaEngine& engine) {
          return *make(engine)->device_selection(engine.config(), budget);
        };
      };
  methods.push_back({"binarypc", std::nullopt,
                     selection(
                         [dense0](const CudaEngine& engine) {
                           return make_binarypc_selector(dense0, Budget::parse("64"),
                                                         projections_of(engine));
                         },
                         64)});
  methods.push_back(
      {"quest-per-head", std::nullopt,
       selection(
           [dense0](const CudaEngine&) { return make_quest_selector(dense0, Budget::parse("64")); },
           64)});
  methods.push_back({"quest-shared-growing", std::nullopt,
                     selection(
                         [](const CudaEngine&) {
                           return make_quest_selector(
                               {{"dense_layers", {0}}, {"gqa", "shared"}, {"keep_last_page", true}},
                               Budget::parse("512"));
                         },
                         512)});
  methods.push_back({"magicpig-short-codes", std::nullopt,
                     selection(
                         [](const CudaEngine&) {
                           return make_magicpig_selector(
                               {{"dense_layers", {0}}, {"K", 3}, {"L", 16}, {"threshold", 3}},
                               Budget::parse("64"));
                         },
                         64)});
  methods.push_back(
      {"topk-fraction", std::nullopt,
       selection(
           [dense0](const CudaEngine&) { return make_topk_selector(dense0, Budget::parse("33%")); },
           99)});
  return methods;
}

// An engine holding prompts[first .. first + count) as its sequences 0 .. count - 1; `greedy`
// gets each one's greedy token after its prompt.
std::unique_ptr<CudaEngine> engine_with(const ModelWeights& weights,
                                        const std::vector<std::vector<int32_t>>& prompts, int first,
                                        int count, int capacity,
                                        std::vector<int32_t>* greedy = nullptr) {
  auto engine = CudaEngine::from_weights(weights);
  engine->allocate_cache(count, capacity);
  for (int b = 0; b < count; ++b) {
    const int32_t token = argmax(engine->prefill(b, prompts[first + b]));
    if (greedy) greedy->push_back(token);
  }
  return engine;
}

// One step of sequences [first, first + count) of `batch` (a sub-batch) and of every sequence of
// `alone`, both fed `tokens` (then the next greedy tokens of `alone`): the same logits bit for
// bit, the same tokens and, for selections, the same lists.
void expect_range_equals_engine_alone(CudaEngine& batch, int first, int count, CudaEngine& alone,
                                      std::vector<int32_t>& tokens, int step, bool selects,
                                      const std::string& where) {
  const ModelConfig& c = batch.config();
  std::vector<int32_t> positions(count);
  for (int b = 0; b < count; ++b) {
    positions[b] = alone.next_position(b);
    ASSERT_EQ(batch.next_position(first + b), positions[b]) << where;
  }
  batch.set_next_tokens(first, tokens, positions);
  batch.decode_step(first, count, /*use_graph=*/true);
  alone.set_next_tokens(tokens, positions);
  alone.decode_step(/*use_graph=*/true);
  tokens = alone.next_tokens();
  EXPECT_EQ(batch.next_tokens(first, count), tokens) << where << " step " << step;
  for (int b = 0; b < count; ++b) {
    const std::vector<float> got = batch.last_logits(first + b);
    const std::vector<float> want = alone.last_logits(b);
    EXPECT_EQ(test::max_abs_diff(got, want), 0.0)
        << where << " step " << step << " sequence " << first + b;
    if (!selects) continue;
    for (int l = 0; l < c.n_layers; ++l)
      for (int a = 0; a < c.n_query_heads; ++a)
        ASSERT_EQ(batch.sparse_selection(l, first + b, a), alone.sparse_selection(l, b, a))
            << where << " step " << step << " sequence " << first + b << " layer " << l
            << " query head " << a;
  }
}

// A batch of four, stepped as the ranges [0], [1, 2] and [3] in turn, against three engines each
// holding one range alone. Plain attention and ART on ragged prompts; selections need every
// sequence at the same length when they start, so there the prompts differ in content only.
TEST(CudaSubBatch, RangeStepsEqualAnEngineHoldingOnlyThatRange) {
  KVB_REQUIRE_GPU();
  const ModelConfig config = subbatch_config();
  auto weights = random_weights(config, 23);
  const std::vector<std::pair<int, int>> ranges = {{0, 1}, {1, 2}, {3, 1}};
  for (const DecodeMethod& method : decode_methods()) {
    SCOPED_TRACE(method.name);
    const bool selects = static_cast<bool>(method.selection);
    std::vector<std::vector<int32_t>> prompts;
    for (int b = 0; b < 4; ++b) prompts.push_back(prompt_of(b, selects ? 300 : 150 + 70 * b));
    const int capacity = 420 + kSteps;
    auto batch = engine_with(*weights, prompts, 0, 4, capacity);
    start_method(*batch, method, *batch);
    std::vector<std::unique_ptr<CudaEngine>> alone;
    std::vector<std::vector<int32_t>> tokens(ranges.size());
    for (size_t r = 0; r < ranges.size(); ++r) {
      alone.push_back(
          engine_with(*weights, prompts, ranges[r].first, ranges[r].second, capacity, &tokens[r]));
      start_method(*alone.back(), method, *batch);
    }
    const CudaEngine::EarlyExitCounts before = batch->early_exit_counts();
    for (int step = 0; step < kSteps; ++step)
      for (size_t r = 0; r < ranges.size(); ++r) {
        const auto [first, count] = ranges[r];
        const std::vector<int> lengths_before = {batch->length(1, 0, 1), batch->length(1, 3, 0)};
        expect_range_equals_engine_alone(
            *batch, first, count, *alone[r], tokens[r], step, selects,
            "range " + std::to_string(first) + "+" + std::to_string(count));
        // Sequences outside the range are neither read nor written.
        if (first != 0) {
          EXPECT_EQ(batch->length(1, 0, 1), lengths_before[0]);
        }
        if (first + count <= 3) {
          EXPECT_EQ(batch->length(1, 3, 0), lengths_before[1]);
        }
      }
    for (int b = 0; b < 4; ++b)
      EXPECT_EQ(batch->next_position(b), static_cast<int>(prompts[b].size()) + kSteps);
    if (method.art) {
      // ART's counts add up over every range's steps: the engines alone together.
      const CudaEngine::EarlyExitCounts after = batch->early_exit_counts();
      int64_t visited = 0, total = 0;
      for (const auto& engine : alone) {
        visited += engine->early_exit_counts().visited;
        total += engine->early_exit_counts().total;
      }
      EXPECT_GT(total, 0);
      EXPECT_EQ(after.total - before.total, total);
      EXPECT_EQ(after.visited - before.visited, visited);
    }
  }
}

// A selection started for a range only ([1, 3) of four sequences; the others hold prompts of other
// lengths, as the shared prefill and another decode group's cells do in generate_cells): its steps
// equal an engine holding only that range, lists included, and a step beyond the range is refused.
TEST(CudaSubBatch, SelectionStartedForARangeEqualsAnEngineHoldingOnlyThatRange) {
  KVB_REQUIRE_GPU();
  const ModelConfig config = subbatch_config();
  auto weights = random_weights(config, 29);
  for (const DecodeMethod& method : decode_methods()) {
    if (!method.selection) continue;
    SCOPED_TRACE(method.name);
    const std::vector<std::vector<int32_t>> prompts = {prompt_of(0, 200), prompt_of(1, 300),
                                                       prompt_of(2, 300), prompt_of(3, 350)};
    const int capacity = 420 + kSteps;
    auto batch = engine_with(*weights, prompts, 0, 4, capacity);
    std::vector<int32_t> tokens;
    auto alone = engine_with(*weights, prompts, 1, 2, capacity, &tokens);
    EXPECT_THROW(batch->start_sparse_decode(method.selection(*alone)), InputError);  // ragged
    batch->start_sparse_decode(method.selection(*alone), 1, 2);
    alone->start_sparse_decode(method.selection(*alone));
    for (int step = 0; step < kSteps; ++step)
      expect_range_equals_engine_alone(*batch, 1, 2, *alone, tokens, step, /*selects=*/true,
                                       "range 1+2");
    EXPECT_THROW(batch->decode_step(0, 2, /*use_graph=*/true), InputError);
    EXPECT_EQ(batch->length(1, 0, 0), 200);
    EXPECT_EQ(batch->length(1, 3, 1), 350);
  }
}

// The same caches decoded by the full batched step and one sequence at a time, on the same
// (batched) greedy tokens.
TEST(CudaSubBatch, SequencesOneAtATimeGiveTheBatchedStepsTokens) {
  KVB_REQUIRE_GPU();
  const ModelConfig config = subbatch_config();
  auto weights = random_weights(config, 31);
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < 4; ++b) prompts.push_back(prompt_of(b, 120 + 90 * b));
  const int capacity = 400 + kSteps;
  std::vector<int32_t> tokens, positions(4);
  auto together = engine_with(*weights, prompts, 0, 4, capacity, &tokens);
  auto one_by_one = engine_with(*weights, prompts, 0, 4, capacity);
  for (int b = 0; b < 4; ++b) positions[b] = static_cast<int>(prompts[b].size());
  int compared = 0, steps = 0;
  for (int step = 0; step < kSteps; ++step) {
    together->set_next_tokens(tokens, positions);
    together->decode_step(/*use_graph=*/true);
    const std::vector<int32_t> batched = together->next_tokens();
    for (int b = 0; b < 4; ++b) {
      one_by_one->set_next_tokens(b, {tokens[b]}, {positions[b]});
      one_by_one->decode_step(b, 1, /*use_graph=*/true);
      const int32_t alone = one_by_one->next_tokens(b, 1)[0];
      const std::vector<float> want = together->last_logits(b);
      const std::vector<float> got = one_by_one->last_logits(b);
      double scale = 0;
      for (float x : want) scale = std::max(scale, double(std::abs(x)));
      const double diff = test::max_abs_diff(got, want);
      EXPECT_LT(diff, 0.02 * scale) << "step " << step << " sequence " << b;
      std::vector<float> top = want;
      std::nth_element(top.begin(), top.begin() + 1, top.end(), std::greater<float>());
      ++steps;
      if (top[0] - top[1] > 2 * diff) {
        EXPECT_EQ(alone, batched[b]) << "step " << step << " sequence " << b;
        ++compared;
      }
      ++positions[b];
    }
    tokens = batched;
  }
  EXPECT_GE(compared * 10, steps * 8) << "too many near-ties to compare the tokens";
  for (int b = 0; b < 4; ++b)
    EXPECT_EQ(one_by_one->length(0, b, 0), together->length(0, b, 0)) << "sequence " << b;
}

TEST(CudaSubBatch, RangesOutsideTheBatchAreRefused) {
  KVB_REQUIRE_GPU();
  auto weights = random_weights(subbatch_config(), 3);
  auto engine = CudaEngine::from_weights(*weights);
  engine->allocate_cache(2, 64);
  EXPECT_THROW(engine->decode_step(1, 2, true), InputError);
  EXPECT_THROW(engine->decode_step(-1, 1, true), InputError);
  EXPECT_THROW(engine->decode_step(0, 0, true), InputError);
  EXPECT_THROW(engine->set_next_tokens(2, {1}, {0}), InputError);
  EXPECT_THROW(engine->next_tokens(1, 2), InputError);
}

// generate_cells with batch_cells false: one prefill for every decode group (plain attention,
// ART, Quest), kept in a sequence of its own while each group's cells are forked from it and
// decoded one after another, each exactly as it decodes with a batch and a prefill of its own
// (the same capacity: every cell asks for the same new tokens). ART's two cells share a group and
// each records its own walk counts.
TEST(CudaSubBatch, CellsOneAfterAnotherEqualEachCellAlone) {
  KVB_REQUIRE_GPU();
  const ModelConfig config = subbatch_config();
  auto weights = random_weights(config, 41);
  CudaBackend gpu(*weights);
  const std::vector<TokenId> context = prompt_of(0, 400);
  const std::vector<std::pair<std::string, std::string>> cells = {
      {"full", ""},          {"snapkv", "50%"}, {"streamingllm", "40%"}, {"knorm", "30%"},
      {"snapkv+art", "50%"}, {"full+art", ""},  {"quest", "64"}};
  GenerationOptions options;
  options.max_new_tokens = 8;
  auto plan_of = [](const std::pair<std::string, std::string>& cell) {
    return make_cache_plan(
        cell.first, nlohmann::json::object(),
        cell.second.empty() ? std::nullopt : std::optional(Budget::parse(cell.second)));
  };
  std::vector<CachePlan> plans;
  for (const auto& cell : cells) plans.push_back(plan_of(cell));
  std::vector<CellRequest> requests;
  for (auto& plan : plans) requests.push_back({&plan, options});
  const auto one_after_another =
      generate_cells(gpu, nullptr, context, {}, requests, BatchOptions{false});
  const auto together = generate_cells(gpu, nullptr, context, {}, requests, BatchOptions{true});
  for (size_t i = 0; i < cells.size(); ++i) {
    SCOPED_TRACE(cells[i].first + " " + cells[i].second);
    CachePlan plan = plan_of(cells[i]);
    const auto alone =
        generate_cells(gpu, nullptr, context, {}, {CellRequest{&plan, options}}, BatchOptions{});
    const GenerationResult& r = one_after_another[i];
    EXPECT_EQ(r.decode_batch, 1);
    EXPECT_EQ(r.output_ids, alone[0].output_ids);
    EXPECT_EQ(r.kv_bytes, alone[0].kv_bytes);
    EXPECT_EQ(r.kv_bytes_end, alone[0].kv_bytes_end);
    EXPECT_EQ(r.kv_blocks_visited, alone[0].kv_blocks_visited);
    EXPECT_EQ(r.kv_blocks_total, alone[0].kv_blocks_total);
    if (plans[i].early_exit) {
      EXPECT_GT(r.kv_blocks_total, 0);
    }
    EXPECT_EQ(together[i].kv_bytes, r.kv_bytes);
    std::printf("[ cell     ] %-12s %-4s one by one %zu tokens, together %s\n",
                cells[i].first.c_str(), cells[i].second.c_str(), r.output_ids.size(),
                together[i].output_ids == r.output_ids ? "the same" : "different (near-tie)");
  }
}

}  // namespace
}  // namespace kvb
