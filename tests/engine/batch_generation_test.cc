// generate_cells (engine/batch_generation.h) on the CPU backend against the single-sequence
// Generator, the path the CPU engine's tests already hold to a naive reference: every cell of a
// batch, decoded together or one at a time, gives the ids, stop reason and KV bytes that the cell
// gives on its own, in both prompt modes, for prefill policies, a decode selector and ART.
#include "engine/batch_generation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "common/errors.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/forward.h"
#include "policies/registry.h"
#include "tests/engine/tiny_model.h"

namespace kvb {
namespace {

struct CellSpec {
  std::string policy;
  std::string budget;
  int max_new_tokens;
  std::vector<TokenId> stop_ids = {};
};

CachePlan plan_of(const CellSpec& spec) {
  std::optional<Budget> budget;
  if (!spec.budget.empty()) budget = Budget::parse(spec.budget);
  nlohmann::json params = nlohmann::json::object();
  if (spec.policy == "snapkv") params["window"] = 4;
  if (spec.policy == "snapkv+art") params["snapkv"] = {{"window", 4}};
  if (spec.policy == "binarypc") params["dense_layers"] = nlohmann::json::array();
  return make_cache_plan(spec.policy, params, budget);
}

// One plan per cell, and the requests that point at them (`plans` must outlive the requests).
std::vector<CachePlan> plans_of(const std::vector<CellSpec>& cells) {
  std::vector<CachePlan> plans;
  for (const auto& spec : cells) plans.push_back(plan_of(spec));
  return plans;
}

GenerationOptions options_of(const CellSpec& spec) {
  GenerationOptions options;
  options.max_new_tokens = spec.max_new_tokens;
  options.extra_stop_ids = spec.stop_ids;
  return options;
}

std::vector<CellRequest> requests_of(std::vector<CachePlan>& plans,
                                     const std::vector<CellSpec>& cells) {
  std::vector<CellRequest> requests;
  for (size_t i = 0; i < cells.size(); ++i) requests.push_back({&plans[i], options_of(cells[i])});
  return requests;
}

const std::vector<CellSpec> kCells = {
    {"full", "", 7},           {"snapkv", "50%", 5},  {"streamingllm", "40%", 9},
    {"snapkv", "25%", 6},      {"binarypc", "16", 6}, {"snapkv+art", "50%", 4},
    {"knorm", "30%", 8, {13}},
};

void expect_cells_match_alone(bool with_question, bool batch_cells,
                              KvDtype kv_dtype = KvDtype::kF32) {
  test::TinyShape shape;
  shape.n_layers = 3;
  const ModelWeights w = test::tiny_model(shape, 5);
  const auto context = test::random_token_ids(48, w.config.vocab_size, 8);
  const auto question =
      with_question ? test::random_token_ids(5, w.config.vocab_size, 9) : std::vector<TokenId>{};

  std::vector<CachePlan> plans = plans_of(kCells);
  const std::vector<CellRequest> requests = requests_of(plans, kCells);
  CpuBackend backend(w, kv_dtype);
  const auto results =
      generate_cells(backend, nullptr, context, question, requests, BatchOptions{batch_cells});
  ASSERT_EQ(results.size(), kCells.size());

  CpuEngine engine(w, kv_dtype);
  Generator generator(engine, nullptr);
  for (size_t i = 0; i < kCells.size(); ++i) {
    SCOPED_TRACE(kCells[i].policy + " " + kCells[i].budget);
    CachePlan alone = plan_of(kCells[i]);
    const GenerationResult expected =
        generator.generate(context, alone, options_of(kCells[i]), question);
    EXPECT_EQ(results[i].output_ids, expected.output_ids);
    EXPECT_EQ(results[i].stop_reason, expected.stop_reason);
    EXPECT_EQ(results[i].output_tokens, expected.output_tokens);
    EXPECT_EQ(results[i].prompt_tokens, expected.prompt_tokens);
    EXPECT_EQ(results[i].budget_tokens, expected.budget_tokens);
    EXPECT_EQ(results[i].kv_bytes_full, expected.kv_bytes_full);
    EXPECT_EQ(results[i].kv_bytes, expected.kv_bytes);
    EXPECT_EQ(results[i].kv_bytes_end, expected.kv_bytes_end);
    EXPECT_EQ(results[i].kv_blocks_visited, expected.kv_blocks_visited);
    EXPECT_GT(results[i].ttft_ms, 0);
    if (!batch_cells) EXPECT_EQ(results[i].decode_batch, 1);
  }
}

TEST(BatchGeneration, CellsDecodedTogetherMatchEachCellAlone) {
  expect_cells_match_alone(/*with_question=*/false, /*batch_cells=*/true);
}

TEST(BatchGeneration, QuestionAgnosticCellsMatchEachCellAlone) {
  expect_cells_match_alone(/*with_question=*/true, /*batch_cells=*/true);
}

TEST(BatchGeneration, OneCellAtATimeMatchesEachCellAlone) {
  expect_cells_match_alone(/*with_question=*/true, /*batch_cells=*/false);
}

// A 16-bit cache: the prefill policies read it through the backend's f32 copy and the selector
// and ART through a widened store, on both paths alike.
TEST(BatchGeneration, CellsOverA16BitCacheMatchEachCellAlone) {
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBf16}) {
    SCOPED_TRACE(kv_dtype_name(dtype));
    expect_cells_match_alone(/*with_question=*/true, /*batch_cells=*/true, dtype);
  }
}

// An engine that counts what generate_cells asks of the backend it wraps.
class CountingEngine final : public Engine {
 public:
  explicit CountingEngine(Engine& inner) : inner_(inner) {}
  int prefills = 0, forks = 0;
  size_t widest_decode = 0;  // the most sequences one decode call was given

  const ModelConfig& config() const override { return inner_.config(); }
  std::string backend_name() const override { return inner_.backend_name(); }
  const ModelWeights& weights() const override { return inner_.weights(); }
  int64_t weight_bytes() const override { return inner_.weight_bytes(); }
  void check_plan(const CachePlan& plan) const override { inner_.check_plan(plan); }
  void reserve(int sequences, int capacity) override { inner_.reserve(sequences, capacity); }
  int max_sequences(int capacity) const override {
    return std::min(most_sequences, inner_.max_sequences(capacity));
  }
  int most_sequences = 1 << 30;  // a smaller memory than the inner engine's
  std::vector<float> prefill(int seq, std::span<const TokenId> ids, const CaptureRequest& request,
                             PrefillCapture& capture) override {
    ++prefills;
    return inner_.prefill(seq, ids, request, capture);
  }
  PrefillView prefill_view(int seq, const PrefillCapture& capture, const CaptureRequest& request,
                           KvStore& host_copy) const override {
    return inner_.prefill_view(seq, capture, request, host_copy);
  }
  KvStore host_store(int seq) const override { return inner_.host_store(seq); }
  void fork(int from, int to) override {
    ++forks;
    inner_.fork(from, to);
  }
  void compact(int seq, const KeptIndices& kept, int spare) override {
    inner_.compact(seq, kept, spare);
  }
  std::vector<TokenId> extend(std::span<const int> sequences, std::span<const TokenId> ids,
                              int first_position) override {
    return inner_.extend(sequences, ids, first_position);
  }
  void start_decode(int seq, CachePlan& plan, int prompt_tokens, int budget_tokens) override {
    inner_.start_decode(seq, plan, prompt_tokens, budget_tokens);
  }
  void prepare_decode() override { inner_.prepare_decode(); }
  std::vector<TokenId> decode(std::span<const DecodeInput> inputs) override {
    widest_decode = std::max(widest_decode, inputs.size());
    return inner_.decode(inputs);
  }
  void finish_decode(int seq) override { inner_.finish_decode(seq); }
  int64_t kv_bytes(int seq) const override { return inner_.kv_bytes(seq); }
  int64_t peak_memory_bytes() const override { return inner_.peak_memory_bytes(); }
  void reset_peak_memory() override { inner_.reset_peak_memory(); }

 private:
  Engine& inner_;
};

// Prefill reuse alone (`kvbench run --no-batch-cells`): the cells share a single prefill, are
// forked from it and decoded one at a time (every decode call at batch 1), with the tokens they
// decode together; a decode selector or ART gets a batch per decode group, still forked from the
// one prefill. Cells alone (latency rows) each get a prefill of their own, with the same tokens.
TEST(BatchGeneration, CellsOneAtATimeShareOnePrefill) {
  test::TinyShape shape;
  shape.n_layers = 3;
  const ModelWeights w = test::tiny_model(shape, 6);
  const auto context = test::random_token_ids(48, w.config.vocab_size, 4);
  const auto question = test::random_token_ids(4, w.config.vocab_size, 5);
  const std::vector<CellSpec> cells = {
      {"full", "", 6},           {"snapkv", "50%", 5},     {"streamingllm", "40%", 7},
      {"knorm", "30%", 6, {13}}, {"snapkv+art", "50%", 5}, {"full+art", "", 4}};
  auto run = [&](bool batch_cells, bool cells_alone = false) {
    std::vector<CachePlan> plans = plans_of(cells);
    const std::vector<CellRequest> requests = requests_of(plans, cells);
    CpuBackend cpu(w);
    CountingEngine counting(cpu);
    auto results =
        generate_cells(counting, nullptr, context, question, requests,
                       BatchOptions{.batch_cells = batch_cells, .cells_alone = cells_alone});
    return std::make_tuple(std::move(results), counting.prefills, counting.forks,
                           counting.widest_decode);
  };
  const auto [alone, alone_prefills, alone_forks, alone_widest] = run(false);
  const auto [together, together_prefills, together_forks, together_widest] = run(true);
  // A latency row's cells run as requests of their own: a prefill each, nothing forked.
  const auto [requests, request_prefills, request_forks, request_widest] = run(false, true);
  EXPECT_EQ(request_prefills, static_cast<int>(cells.size()));
  EXPECT_EQ(request_forks, 0);
  EXPECT_EQ(request_widest, 1u);
  // Two decode groups (plain attention; the ART walk) from one prefill, which stays in a sequence
  // of its own: every cell is forked from it.
  EXPECT_EQ(alone_prefills, 1);
  EXPECT_EQ(alone_forks, static_cast<int>(cells.size()));
  EXPECT_EQ(alone_widest, 1u);
  EXPECT_EQ(together_prefills, alone_prefills);
  EXPECT_EQ(together_forks, alone_forks);
  EXPECT_GT(together_widest, 1u);
  ASSERT_EQ(alone.size(), cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    SCOPED_TRACE(cells[i].policy + " " + cells[i].budget);
    EXPECT_EQ(alone[i].output_ids, together[i].output_ids);
    EXPECT_EQ(alone[i].stop_reason, together[i].stop_reason);
    EXPECT_EQ(alone[i].kv_bytes, together[i].kv_bytes);
    EXPECT_EQ(alone[i].kv_blocks_visited, together[i].kv_blocks_visited);
    EXPECT_EQ(alone[i].decode_batch, 1);
    EXPECT_GT(together[i].decode_batch, 1);
    EXPECT_EQ(requests[i].output_ids, together[i].output_ids);
    EXPECT_EQ(requests[i].kv_bytes, together[i].kv_bytes);
    EXPECT_EQ(requests[i].decode_batch, 1);
  }
}

// Room for the prompt and two cells only: every decode group (plain attention, a selector, ART)
// is decoded in parts of two, all forked from the one prefill, each cell as it decodes alone.
TEST(BatchGeneration, GroupsLargerThanMemoryAreSplitOverOnePrefill) {
  test::TinyShape shape;
  shape.n_layers = 3;
  const ModelWeights w = test::tiny_model(shape, 7);
  const auto context = test::random_token_ids(40, w.config.vocab_size, 3);
  std::vector<CachePlan> plans = plans_of(kCells);
  const std::vector<CellRequest> requests = requests_of(plans, kCells);
  CpuBackend cpu(w);
  CountingEngine counting(cpu);
  counting.most_sequences = 3;
  const auto results = generate_cells(counting, nullptr, context, {}, requests);
  EXPECT_EQ(counting.prefills, 1);
  EXPECT_EQ(counting.forks, static_cast<int>(kCells.size()));
  EXPECT_EQ(counting.widest_decode, 2u);
  CpuEngine engine(w);
  Generator generator(engine, nullptr);
  for (size_t i = 0; i < kCells.size(); ++i) {
    SCOPED_TRACE(kCells[i].policy + " " + kCells[i].budget);
    CachePlan alone = plan_of(kCells[i]);
    const GenerationResult expected = generator.generate(context, alone, options_of(kCells[i]));
    EXPECT_EQ(results[i].output_ids, expected.output_ids);
    EXPECT_EQ(results[i].kv_bytes, expected.kv_bytes);
    EXPECT_EQ(results[i].kv_bytes_end, expected.kv_bytes_end);
  }
}

TEST(BatchGeneration, DecodeGroupsSeparateSelectorsAndArt) {
  const CachePlan full = make_cache_plan("full", nlohmann::json::object(), std::nullopt);
  const CachePlan snap = make_cache_plan("snapkv", nlohmann::json::object(), Budget::parse("50%"));
  const CachePlan art1 =
      make_cache_plan("snapkv+art", nlohmann::json::object(), Budget::parse("50%"));
  const CachePlan art2 = make_cache_plan("full+art", nlohmann::json::object(), std::nullopt);
  const CachePlan quest = make_cache_plan("quest", nlohmann::json::object(), Budget::parse("64"));
  EXPECT_EQ(decode_group_of(full), "");
  EXPECT_EQ(decode_group_of(snap), "");
  EXPECT_EQ(decode_group_of(art1), decode_group_of(art2));  // same walk, any prefill policy
  EXPECT_NE(decode_group_of(art1), "");
  // Walks that differ in any ART reading are different walks.
  for (const nlohmann::json& reading :
       {nlohmann::json{{"scale_criterion", "mass"}}, nlohmann::json{{"terms", "scale"}},
        nlohmann::json{{"stop", "head"}}, nlohmann::json{{"decision_window", 4}}})
    EXPECT_NE(decode_group_of(make_cache_plan("full+art", {{"art", reading}}, std::nullopt)),
              decode_group_of(art2))
        << reading.dump();
  EXPECT_NE(decode_group_of(quest), "");
  const CachePlan quest2 = make_cache_plan("quest", nlohmann::json::object(), Budget::parse("64"));
  EXPECT_NE(decode_group_of(quest), decode_group_of(quest2));  // stateful: a batch each
}

TEST(BatchGeneration, ContextLimitIsCheckedBeforeThePrefill) {
  test::TinyShape shape;
  shape.max_context = 40;
  const ModelWeights w = test::tiny_model(shape, 3);
  CpuBackend backend(w);
  CachePlan full;
  GenerationOptions options;
  options.max_new_tokens = 4;
  EXPECT_THROW(generate_cells(backend, nullptr, test::random_token_ids(41, w.config.vocab_size, 1),
                              {}, {CellRequest{&full, options}}),
               CapacityError);
}

}  // namespace
}  // namespace kvb
