// The decode-time methods on SmolLM2-135M-Instruct answering a needle-in-a-haystack question in a
// ~2,000-token prompt at 10% budgets (issue 4's end-to-end check), with accuracy per method and the
// fraction of KV blocks ART skipped.
//
// Protocol: KVCache-Factory's run_needle_in_haystack.py as described in specs/benchmarks.md §2.2
// (haystack = the Paul Graham essays in sorted order; needle inserted at int(len * depth/100)
// tokens, moved left to the previous "." token; 200-token buffer; greedy decoding, 30 new tokens,
// stop at a newline) and its visualize.py score (share of the 10 expected words in the response).
// The needle, question and prompt strings below are those protocol constants, written exactly.
//
// Samples: KVB_NIAH_SAMPLES (default 2) depths from round(linspace(0, 100, n)). The test prints a
// table; run with KVB_NIAH_SAMPLES=10 for the report's numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "engine/cpu/forward.h"
#include "engine/generation.h"
#include "engine/model.h"
#include "harness/cli.h"
#include "policies/registry.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

// gkamradt/LLMTest_NeedleInAHaystack, as used by KVCache-Factory run_needle_in_haystack.py.
constexpr const char* kNeedle =
    "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny "
    "day.\n";
constexpr const char* kQuestion = "The best thing to do in San Francisco is: ";
constexpr const char* kExpected = "eat a sandwich and sit in dolores park on a sunny day.";
// KVCache-Factory run_needle_in_haystack.py raw prompt (no chat template).
std::string niah_prompt(const std::string& context) {
  return std::string("<|im_start|> This is a very long story book: <book> ") + context +
         " </book>.\n Based on the content of the book, Question: " + kQuestion + "\nAnswer:";
}

// KVCache-Factory scripts_needle/visualize.py: |set(words) ∩ set(expected words)| / |set(expected)|.
double needle_score(const std::string& response) {
  auto words = [](std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    std::istringstream in(text);
    std::set<std::string> set;
    for (std::string word; in >> word;) set.insert(word);
    return set;
  };
  const std::set<std::string> expected = words(kExpected);
  int hits = 0;
  for (const std::string& word : words(response)) hits += expected.count(word);
  return static_cast<double>(hits) / expected.size();
}

std::vector<TokenId> haystack_tokens(const Tokenizer& tokenizer, int needed) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(test::fixtures_dir() / "haystack" / "pg_essays"))
    files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& file : files) {
    std::ifstream in(file);
    std::ostringstream content;
    content << in.rdbuf();
    text += content.str();
    if (static_cast<int>(text.size()) > needed * 6) break;  // > 4-5 characters per token
  }
  std::vector<TokenId> tokens = tokenizer.encode(text);
  tokens.resize(std::min<size_t>(tokens.size(), needed));
  return tokens;
}

// The context with the needle at `depth` percent (specs/benchmarks.md §2.1 steps 1-5).
std::string context_with_needle(const Tokenizer& tokenizer, int context_length, int depth) {
  std::vector<TokenId> haystack = tokenizer.encode(tokenizer.decode(haystack_tokens(tokenizer, context_length)));
  const std::vector<TokenId> needle = tokenizer.encode(kNeedle);
  const int target = context_length - 200;
  if (static_cast<int>(haystack.size() + needle.size()) > target)
    haystack.resize(std::max<int>(0, target - static_cast<int>(needle.size())));
  std::vector<TokenId> with;
  if (depth == 100) {
    with = haystack;
    with.insert(with.end(), needle.begin(), needle.end());
  } else {
    const std::vector<TokenId> period = tokenizer.encode(".");
    int at = static_cast<int>(haystack.size() * (depth / 100.0));
    while (at > 0 && std::find(period.begin(), period.end(), haystack[at - 1]) == period.end()) --at;
    with.assign(haystack.begin(), haystack.begin() + at);
    with.insert(with.end(), needle.begin(), needle.end());
    with.insert(with.end(), haystack.begin() + at, haystack.end());
  }
  return tokenizer.decode(with, true);
}

struct Method {
  std::string label;
  std::string policy;
  nlohmann::json params;
};

// Disabled in the default run: its pass thresholds (Full and TOPK >= 0.5) have not yet been checked
// against a completed run, and 10 methods x ~2K-token prompts on the CPU take minutes. Run it by
// hand: KVB_NIAH_SAMPLES=10 kvb_policy_tests --gtest_also_run_disabled_tests --gtest_filter=DecodeNiah.*
TEST(DecodeNiah, DISABLED_MethodsAnswerAtTenPercentBudgets) {
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::fixtures_dir() / "haystack" / "pg_essays");
  const LoadedModel model = load_model(test::default_model_path().string());
  const std::shared_ptr<const Tokenizer> tokenizer =
      model.tokenizer ? model.tokenizer
                      : std::shared_ptr<const Tokenizer>(tokenizer_from_path(test::default_model_path().string()));
  const char* samples_env = std::getenv("KVB_NIAH_SAMPLES");
  const int samples = samples_env ? std::max(1, std::atoi(samples_env)) : 2;

  // OPC: a projection calibrated on the essays through `kvbench calibrate`.
  const std::filesystem::path projection =
      std::filesystem::temp_directory_path() / "kvb_decode_niah_proj.bin";
  ASSERT_EQ(cli::calibrate({"--model", test::default_model_path().string(), "--data",
                            (test::fixtures_dir() / "haystack" / "pg_essays").string(), "--out",
                            projection.string(), "--max-tokens", "4096", "--json"}),
            0);

  const std::vector<Method> methods = {
      {"full", "full", nlohmann::json::object()},
      {"topk", "topk", nlohmann::json::object()},
      {"quest", "quest", nlohmann::json::object()},
      {"magicpig", "magicpig", nlohmann::json::object()},
      {"binarypc (online)", "binarypc", nlohmann::json::object()},
      {"binarypc (OPC)", "binarypc", {{"projection", projection.string()}}},
      {"binarypc (no EAS)", "binarypc", {{"eas", false}}},
      {"full+art", "full+art", nlohmann::json::object()},
      {"snapkv+art", "snapkv+art", nlohmann::json::object()},
      {"streamingllm+art", "streamingllm+art", nlohmann::json::object()},
  };
  const std::optional<Budget> budget = Budget::parse("10%");
  std::vector<CachePlan> plans;
  CaptureRequest request;
  for (const Method& method : methods) {
    plans.push_back(make_cache_plan(method.policy, method.params,
                                    method.policy == "full" || method.policy == "full+art"
                                        ? std::nullopt
                                        : budget));
    if (plans.back().prefill) request.merge(plans.back().prefill->capture());
  }

  CpuEngine engine(*model.weights);
  Generator generator(engine, tokenizer.get());
  GenerationOptions options;
  options.max_new_tokens = 30;
  options.stop_strings = {"\n"};
  std::vector<double> score(methods.size(), 0.0);
  std::vector<int64_t> visited(methods.size(), 0), total(methods.size(), 0);
  int prompt_tokens = 0;
  for (int s = 0; s < samples; ++s) {
    const int depth = samples == 1 ? 50 : static_cast<int>(std::lround(100.0 * s / (samples - 1)));
    const std::string prompt = niah_prompt(context_with_needle(*tokenizer, 2000, depth));
    const std::vector<TokenId> ids =
        tokenizer->encode(prompt, tokenizer->adds_bos_by_default(), true);
    prompt_tokens = static_cast<int>(ids.size());
    const PrefillSnapshot snapshot = generator.prefill(ids, request);
    for (size_t m = 0; m < methods.size(); ++m) {
      const GenerationResult result = generator.continue_generation(snapshot, plans[m], {}, options);
      score[m] += needle_score(result.text) / samples;
      visited[m] += result.kv_blocks_visited;
      total[m] += result.kv_blocks_total;
      std::printf("depth %3d  %-18s %.2f  %s\n", depth, methods[m].label.c_str(),
                  needle_score(result.text), result.text.c_str());
    }
  }
  std::printf("\nNIAH (KVCache-Factory protocol), %d samples, %d-token prompts, budget 10%%\n", samples,
              prompt_tokens);
  std::printf("| method | score | KV blocks skipped by ART |\n|---|---|---|\n");
  for (size_t m = 0; m < methods.size(); ++m) {
    const std::string skipped =
        total[m] > 0 ? std::to_string(100.0 * (1.0 - static_cast<double>(visited[m]) / total[m])) + "%"
                     : "-";
    std::printf("| %s | %.2f | %s |\n", methods[m].label.c_str(), score[m], skipped.c_str());
  }
  std::filesystem::remove(projection);

  EXPECT_GE(score[0], 0.5) << "Full KV must find the needle for the comparison to mean anything";
  EXPECT_GE(score[1], 0.5) << "the TOPK oracle at 10% keeps the needle's attention";
  EXPECT_GT(total[7], 0);
  EXPECT_LT(visited[7], total[7]) << "ART skips blocks on a real cache";
}

}  // namespace
}  // namespace kvb
