// Greedy generation on random tiny models against the naive reference (tests/engine/tiny_model.h):
// greedy ids, both prompt modes, snapshot replay, compression by a prefill policy, stop rules,
// timings and the context limit.
#include "engine/generation.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/errors.h"
#include "engine/cpu/forward.h"
#include "tests/engine/tiny_model.h"

namespace kvb {
namespace {

using test::reference_logits;
using test::tiny_model;
using test::TinyShape;

std::vector<TokenId> random_ids(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<TokenId> ids(n);
  for (auto& id : ids) id = pick(rng);
  return ids;
}

GenerationOptions max_tokens(int n) {
  GenerationOptions options;
  options.max_new_tokens = n;
  return options;
}

int reference_argmax(const std::vector<double>& logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Greedy continuation computed by re-running the naive reference over the whole sequence.
std::vector<TokenId> reference_greedy(const ModelWeights& w, std::vector<TokenId> ids, int n,
                                      const test::AllowedPositions& allowed = {}, int t0 = 0) {
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    const TokenId next = reference_argmax(reference_logits(w, ids, allowed, t0).back());
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

TEST(Generation, GreedyIdsMatchReference) {
  const ModelWeights w = tiny_model(TinyShape{}, 21);
  CpuEngine engine(w);
  Generator generator(engine, nullptr);
  const auto prompt = random_ids(24, w.config.vocab_size, 1);
  CachePlan full;
  const GenerationResult result = generator.generate(prompt, full, max_tokens(6));
  EXPECT_EQ(result.output_ids, reference_greedy(w, prompt, 6));
  EXPECT_EQ(result.stop_reason, "max_new_tokens");
  EXPECT_EQ(result.prompt_tokens, 24);
  EXPECT_EQ(result.output_tokens, 6);
  const int64_t per_token = w.config.kv_bytes_per_token(4);
  EXPECT_EQ(result.kv_bytes_full, 24 * per_token);
  EXPECT_EQ(result.kv_bytes, 24 * per_token);
  EXPECT_EQ(result.kv_bytes_end, 29 * per_token);  // the last sampled token is never fed
  EXPECT_GE(result.ttft_ms, result.prefill_ms);
  EXPECT_GT(result.tpot_ms, 0.0);
  EXPECT_NEAR(result.tpot_ms * 5, result.decode_ms, 1e-9);
  EXPECT_GT(result.peak_rss_bytes, 0);
}

TEST(Generation, ExtraStopIdEndsGenerationWithoutEmittingIt) {
  const ModelWeights w = tiny_model(TinyShape{}, 21);
  CpuEngine engine(w);
  Generator generator(engine, nullptr);
  const auto prompt = random_ids(24, w.config.vocab_size, 1);
  const auto expected = reference_greedy(w, prompt, 6);
  CachePlan full;
  GenerationOptions options = max_tokens(6);
  options.extra_stop_ids = {expected[2]};
  const auto stop = std::find(expected.begin(), expected.end(), expected[2]) - expected.begin();
  const GenerationResult result = generator.generate(prompt, full, options);
  EXPECT_EQ(result.stop_reason, "eos");
  EXPECT_EQ(result.output_ids, std::vector<TokenId>(expected.begin(), expected.begin() + stop));
  EXPECT_EQ(result.output_tokens, stop + 1);
}

TEST(Generation, QuestionAgnosticWithoutCompressionEqualsOnePrompt) {
  const ModelWeights w = tiny_model(TinyShape{.qkv_bias = true}, 22);
  CpuEngine engine(w);
  Generator generator(engine, nullptr);
  const auto context = random_ids(30, w.config.vocab_size, 2);
  const auto question = random_ids(7, w.config.vocab_size, 3);
  auto whole = context;
  whole.insert(whole.end(), question.begin(), question.end());
  CachePlan full;
  const auto agnostic = generator.generate(context, full, max_tokens(5), question);
  const auto aware = generator.generate(whole, full, max_tokens(5));
  EXPECT_EQ(agnostic.output_ids, aware.output_ids);
  EXPECT_EQ(agnostic.prompt_tokens, 37);
  EXPECT_EQ(agnostic.compressed_tokens, 30);
}

// Keeps, in every layer and KV head, the first `sinks` and the last budget - sinks entries (the
// shape of StreamingLLM), and asks for window queries so that the capture path is exercised.
class KeepEnds : public PrefillPolicy {
 public:
  std::string name() const override { return "keep-ends"; }
  PolicyKind kind() const override { return PolicyKind::kPrefillQueryAgnostic; }
  CaptureRequest capture() const override { return CaptureRequest{3, false, false}; }
  KeptIndices select(const PrefillView& view, int budget) const override {
    seen_window = view.layers[0].window;
    std::vector<int32_t> kept;
    for (int j = 0; j < 2; ++j) kept.push_back(j);
    for (int j = view.prompt_length() - (budget - 2); j < view.prompt_length(); ++j)
      kept.push_back(j);
    return KeptIndices(view.layers.size(),
                       std::vector<std::vector<int32_t>>(view.layers[0].n_kv_heads, kept));
  }
  mutable int seen_window = -1;
};

TEST(Generation, CompressedCacheMatchesRestrictedReferenceInBothModes) {
  const ModelWeights w = tiny_model(TinyShape{}, 23);
  CpuEngine engine(w);
  Generator generator(engine, nullptr);
  const auto context = random_ids(40, w.config.vocab_size, 4);
  const auto question = random_ids(5, w.config.vocab_size, 5);
  auto policy = std::make_shared<KeepEnds>();
  CachePlan plan;
  plan.prefill = policy;
  plan.budget = Budget::parse("10");
  std::vector<int> kept = {0, 1};
  for (int j = 32; j < 40; ++j) kept.push_back(j);
  const test::AllowedPositions allowed(2, std::vector<std::vector<int>>(2, kept));

  // Query-aware: the first token comes from the full prefill, later ones see the kept entries.
  const auto aware = generator.generate(context, plan, max_tokens(4));
  std::vector<TokenId> expected = reference_greedy(w, context, 1);
  auto so_far = context;
  so_far.push_back(expected[0]);
  const auto rest = reference_greedy(w, so_far, 3, allowed, 40);
  expected.insert(expected.end(), rest.begin(), rest.end());
  EXPECT_EQ(aware.output_ids, expected);
  EXPECT_EQ(policy->seen_window, 3);
  EXPECT_EQ(aware.budget_tokens, 10);
  const int64_t per_token = w.config.kv_bytes_per_token(4);
  EXPECT_EQ(aware.kv_bytes, 10 * per_token);
  EXPECT_EQ(aware.kv_bytes_full, 40 * per_token);
  EXPECT_EQ(aware.kv_bytes_end, 13 * per_token);

  // Question-agnostic: the question attends to the compressed context.
  auto whole = context;
  whole.insert(whole.end(), question.begin(), question.end());
  const auto agnostic = generator.generate(context, plan, max_tokens(3), question);
  EXPECT_EQ(agnostic.output_ids, reference_greedy(w, whole, 3, allowed, 40));
  EXPECT_EQ(agnostic.kv_bytes, 10 * per_token);

  // Replaying copies of one snapshot (captured for a wider window) gives the same answers.
  const PrefillSnapshot snapshot = generator.prefill(context, CaptureRequest{8, false, false});
  const auto replay1 = generator.continue_generation(snapshot, plan, question, max_tokens(3));
  const auto replay2 = generator.continue_generation(snapshot, plan, question, max_tokens(3));
  EXPECT_EQ(replay1.output_ids, agnostic.output_ids);
  EXPECT_EQ(replay2.output_ids, agnostic.output_ids);
  // The view shows the snapshot's widest window; a policy reads the last rows of its own.
  EXPECT_EQ(policy->seen_window, 8);
  EXPECT_EQ(snapshot.store.length(0, 0), 40);  // the snapshot itself is untouched
}

TEST(Generation, BudgetsOutsideThePromptAreInputErrors) {
  const ModelWeights w = tiny_model(TinyShape{}, 24);
  CpuEngine engine(w);
  Generator generator(engine, nullptr);
  const auto prompt = random_ids(20, w.config.vocab_size, 6);
  CachePlan plan;
  plan.prefill = std::make_shared<KeepEnds>();
  plan.budget = Budget::parse("21");
  EXPECT_THROW(generator.generate(prompt, plan, max_tokens(2)), InputError);
  plan.budget = Budget::parse("1%");  // int(0.01 * 20) = 0 tokens
  EXPECT_THROW(generator.generate(prompt, plan, max_tokens(2)), InputError);
}

TEST(Generation, ContextLimits) {
  const ModelWeights w = tiny_model(TinyShape{.max_context = 32}, 25);
  CpuEngine engine(w);
  Generator generator(engine, nullptr);
  CachePlan full;
  try {
    generator.generate(random_ids(33, w.config.vocab_size, 7), full, max_tokens(2));
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("33 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
  // A prompt that fits stops when the context is full.
  const auto result =
      generator.generate(random_ids(30, w.config.vocab_size, 8), full, max_tokens(10));
  EXPECT_EQ(result.output_tokens, 3);
  EXPECT_EQ(result.stop_reason, "context_full");
}

}  // namespace
}  // namespace kvb
