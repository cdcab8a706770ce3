// generate_cells (engine/batch_generation.h) on the CPU backend against the single-sequence
// Generator, the path the CPU engine's tests already hold to a naive reference: every cell of a
// batch, decoded together or one at a time, gives the ids, stop reason and KV bytes that the cell
// gives on its own, in both prompt modes, for prefill policies, a decode selector and ART.
#include "engine/batch_generation.h"

#include <gtest/gtest.h>

#include <random>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/forward.h"
#include "engine/errors.h"
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

GenerationOptions options_of(const CellSpec& spec) {
  GenerationOptions options;
  options.max_new_tokens = spec.max_new_tokens;
  options.extra_stop_ids = spec.stop_ids;
  return options;
}

const std::vector<CellSpec> kCells = {
    {"full", "", 7},           {"snapkv", "50%", 5},  {"streamingllm", "40%", 9},
    {"snapkv", "25%", 6},      {"binarypc", "16", 6}, {"snapkv+art", "50%", 4},
    {"knorm", "30%", 8, {13}},
};

void expect_cells_match_alone(bool with_question, bool batch_cells) {
  test::TinyShape shape;
  shape.n_layers = 3;
  const ModelWeights w = test::tiny_model(shape, 5);
  const auto context = test::random_token_ids(48, w.config.vocab_size, 8);
  const auto question =
      with_question ? test::random_token_ids(5, w.config.vocab_size, 9) : std::vector<TokenId>{};

  std::vector<CachePlan> plans;
  for (const auto& spec : kCells) plans.push_back(plan_of(spec));
  std::vector<CellRequest> requests;
  for (size_t i = 0; i < kCells.size(); ++i) requests.push_back({&plans[i], options_of(kCells[i])});
  CpuBackend backend(w);
  const auto results =
      generate_cells(backend, nullptr, context, question, requests, BatchOptions{batch_cells});
  ASSERT_EQ(results.size(), kCells.size());

  CpuEngine engine(w);
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
