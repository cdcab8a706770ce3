// Policies on the real model (SmolLM2-135M-Instruct, CPU): a prompt of Paul Graham essay text with
// one embedded fact, compressed by a policy, then a greedy answer. The fast cases run in the suite;
// DISABLED_EveryMethodAtHalfAndTenthBudget is the full sweep behind the table in the report
// (run with --gtest_also_run_disabled_tests --gtest_filter='*EveryMethod*').
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/chat_template.h"
#include "engine/cpu/forward.h"
#include "engine/generation.h"
#include "engine/model.h"
#include "policies/registry.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

const char* kFact = " The secret passcode for the vault is 7481. ";
const char* kQuestion = "What is the secret passcode for the vault? Answer with the number only.";

std::string essay_text() {
  std::ifstream file(test::fixture("haystack/pg_essays/addiction.txt"));
  std::stringstream text;
  text << file.rdbuf();
  std::ifstream more(test::fixture("haystack/pg_essays/apple.txt"));
  text << "\n" << more.rdbuf();
  return text.str();
}

struct RealModel {
  LoadedModel model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<CpuEngine> engine;
  std::unique_ptr<Generator> generator;
};

#define KVB_REQUIRE_TOKENIZER(m)                                                  \
  do {                                                                            \
    if (!(m).tokenizer) GTEST_SKIP() << "this build loads no GGUF tokenizer yet"; \
  } while (0)

RealModel& real_model() {
  static RealModel m = [] {
    RealModel out;
    out.model = load_model(test::default_model_path().string());
    out.engine = std::make_unique<CpuEngine>(*out.model.weights);
    out.tokenizer = out.model.tokenizer ? out.model.tokenizer
                                        : std::shared_ptr<const Tokenizer>(tokenizer_from_path(
                                              test::default_model_path().string()));
    out.generator = std::make_unique<Generator>(*out.engine, out.tokenizer.get());
    return out;
  }();
  return m;
}

// SmolLM2's chat prompt whose user turn holds ~`context_tokens` tokens of essay text
// with the fact in the middle, then the question.
std::vector<TokenId> needle_prompt(const Tokenizer& tokenizer, int context_tokens) {
  std::vector<TokenId> essay = tokenizer.encode(essay_text());
  essay.resize(std::min<size_t>(essay.size(), context_tokens));
  const size_t middle = essay.size() / 2;
  const std::string before = tokenizer.decode({essay.begin(), essay.begin() + middle});
  const std::string after = tokenizer.decode({essay.begin() + middle, essay.end()});
  const std::string text = apply_chat_template(chat_template("chatml-smollm2"),
                                               before + kFact + after + "\n\n" + kQuestion);
  return tokenizer.encode(text, false, true);
}

GenerationResult answer(const PrefillSnapshot& snapshot, const std::string& policy,
                        const std::string& budget) {
  CachePlan plan = make_cache_plan(
      policy, {}, policy == "full" ? std::nullopt : std::optional(Budget::parse(budget)));
  GenerationOptions options;
  options.max_new_tokens = 20;
  return real_model().generator->continue_generation(snapshot, plan, {}, options);
}

CaptureRequest capture_for_all_policies() {
  CaptureRequest request;
  for (const auto& info : list_policies()) {
    if (info.kind == PolicyKind::kKernelWalk || info.name == "full") continue;
    const CachePlan plan = make_cache_plan(info.name, {}, Budget::parse("50%"));
    if (plan.prefill) request.merge(plan.prefill->capture());
  }
  return request;
}

TEST(RealModel, DropKvAndAdaDropKvAtHalfBudgetStillAnswer) {
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays/addiction.txt"));
  RealModel& m = real_model();
  KVB_REQUIRE_TOKENIZER(m);
  const auto ids = needle_prompt(*m.tokenizer, 400);
  CaptureRequest request;
  for (const char* policy : {"dropkv", "adadropkv"})
    request.merge(make_cache_plan(policy, {}, Budget::parse("50%")).prefill->capture());
  const PrefillSnapshot snapshot = m.generator->prefill(ids, request);
  const GenerationResult full = answer(snapshot, "full", "");
  ASSERT_NE(full.text.find("7481"), std::string::npos) << "full KV answered: " << full.text;
  for (const char* policy : {"dropkv", "adadropkv"}) {
    const GenerationResult result = answer(snapshot, policy, "50%");
    EXPECT_NE(result.text.find("7481"), std::string::npos) << policy << ": " << result.text;
    EXPECT_LT(result.kv_bytes, full.kv_bytes);
    EXPECT_NEAR(double(result.kv_bytes) / full.kv_bytes, 0.5, 0.01) << policy;
  }
}

TEST(RealModel, DISABLED_EveryMethodAtHalfAndTenthBudget) {
  KVB_REQUIRE_FILE(test::default_model_path());
  RealModel& m = real_model();
  KVB_REQUIRE_TOKENIZER(m);
  int tokens = 2000;
  if (const char* env = std::getenv("KVB_NEEDLE_TOKENS")) tokens = std::atoi(env);
  const auto ids = needle_prompt(*m.tokenizer, tokens);
  const PrefillSnapshot snapshot = m.generator->prefill(ids, capture_for_all_policies());
  std::printf("prompt %zu tokens, prefill %.0f ms\n", ids.size(), snapshot.prefill_ms);
  std::printf(
      "| policy | budget | correct | answer | compress ms | KV bytes "
      "|\n|---|---|---|---|---|---|\n");
  for (const auto& info : list_policies()) {
    if (info.kind == PolicyKind::kKernelWalk) continue;
    for (const char* budget : {"50%", "10%"}) {
      if (info.name == "full" && std::string(budget) == "10%") continue;
      try {
        const GenerationResult r = answer(snapshot, info.name, budget);
        std::string text = r.text;
        for (auto& c : text)
          if (c == '\n' || c == '|') c = ' ';
        std::printf("| %s | %s | %s | %s | %.0f | %lld |\n", info.name.c_str(),
                    info.name == "full" ? "100%" : budget,
                    r.text.find("7481") != std::string::npos ? "yes" : "no", text.c_str(),
                    r.compress_ms, static_cast<long long>(r.kv_bytes));
      } catch (const std::exception& error) {
        ADD_FAILURE() << info.name << " " << budget << ": " << error.what();
      }
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace kvb
