// The decode-time methods on SmolLM2-135M-Instruct answering a needle-in-a-haystack question in a
// ~2,000-token prompt at 10% budgets (issue 4's end-to-end check), with accuracy per method, the
// fraction of KV blocks ART skipped and ART's probe/oracle agreement on the real model.
//
// Protocol: KVCache-Factory's run_needle_in_haystack.py as described in docs/benchmarks.md §2.2
// (haystack = the Paul Graham essays in sorted order; needle inserted at int(len * depth/100)
// tokens, moved left to the previous "." token; 200-token buffer; greedy decoding, 30 new tokens,
// stop at a newline; see newline_after_text) and its visualize.py score (share of the 10 expected
// words in the response). The needle, question and prompt strings below are those protocol
// constants, written exactly.
//
// Each sample is prefilled once; every method continues from a copy of that snapshot (the
// decode-time methods keep the whole cache, only the prefill policies under ART compress it).
//
// The CI run (default) takes the two depths of kCiDepths and checks per-method thresholds set from
// the measured runs (results/decode-methods-smollm2.md). The report's sweep is run by hand:
//   KVB_NIAH_SAMPLES=10 build/tests/kvb_policy_tests --gtest_filter='DecodeNiah.*'
// (depths round(linspace(0, 100, n)), table only, no per-method thresholds; KVB_NIAH_LENGTH sets
// the context length, default 2000). The OPC projection is calibrated (2,048 tokens) on the essays
// after those the haystack reads, so calibration and haystack texts are disjoint.
//
// ART settings sweep (issue 8), by hand: KVB_NIAH_ART_SWEEP=1 replaces the method list with Full
// and full+art at several (tau, phi, patience) settings plus the same walk without termination
// (the control: what the block-wise walk's arithmetic alone changes), every ART row traced against
// the oracle; no OPC calibration, no thresholds. KVB_NIAH_DEPTHS=50,56,78 picks the depths
// (otherwise KVB_NIAH_SAMPLES, otherwise kCiDepths):
//   KVB_NIAH_ART_SWEEP=1 KVB_NIAH_DEPTHS=50,56,78 build/tests/kvb_policy_tests
// --gtest_filter='DecodeNiah.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/cpu/forward.h"
#include "engine/generation.h"
#include "engine/model.h"
#include "harness/commands/cli.h"
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

// KVCache-Factory scripts_needle/visualize.py: |set(words) ∩ set(expected words)| /
// |set(expected)|.
double needle_score(const std::string& response) {
  auto words = [](std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return std::tolower(c); });
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

// SmolLM2 often answers "Answer:" with a newline first, which the official newline-token stop turns
// into an empty response. The test scores what `kvbench run` scores for NIAH
// (datasets/niah/niah_benchmark.cc): the first non-blank line. Generation stops at the first
// newline after a printable character (what ends that line) instead of running all 30 tokens.
std::vector<std::string> newline_after_text() {
  std::vector<std::string> stops;
  for (char c = '!'; c <= '~'; ++c) stops.push_back(std::string(1, c) + "\n");
  return stops;
}

std::string first_non_blank_line(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = text.find('\n', begin);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

int env_int(const char* name, int fallback, int minimum) {
  const char* text = std::getenv(name);
  return text ? std::max(minimum, std::atoi(text)) : fallback;
}

std::vector<std::filesystem::path> essay_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(test::fixture("haystack/pg_essays")))
    if (entry.path().extension() == ".txt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// The first `needed` tokens of the essays in name order; `files_used` = how many essays were read.
std::vector<TokenId> haystack_tokens(const Tokenizer& tokenizer, int needed, size_t& files_used) {
  const std::vector<std::filesystem::path> files = essay_files();
  std::string text;
  files_used = 0;
  for (const auto& file : files) {
    std::ifstream in(file);
    std::ostringstream content;
    content << in.rdbuf();
    text += content.str();
    ++files_used;
    if (static_cast<int>(text.size()) > needed * 6) break;  // > 4-5 characters per token
  }
  std::vector<TokenId> tokens = tokenizer.encode(text);
  tokens.resize(std::min<size_t>(tokens.size(), needed));
  return tokens;
}

// The context with the needle at `depth` percent (docs/benchmarks.md §2.1 steps 1-5).
std::string context_with_needle(const Tokenizer& tokenizer, int context_length, int depth) {
  size_t files_used = 0;
  std::vector<TokenId> haystack =
      tokenizer.encode(tokenizer.decode(haystack_tokens(tokenizer, context_length, files_used)));
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
    while (at > 0 && std::find(period.begin(), period.end(), haystack[at - 1]) == period.end())
      --at;
    with.assign(haystack.begin(), haystack.begin() + at);
    with.insert(with.end(), needle.begin(), needle.end());
    with.insert(with.end(), haystack.begin() + at, haystack.end());
  }
  return tokenizer.decode(with, true);
}

// OPC calibration texts disjoint from the haystack: a folder linking the essays after those the
// haystack reads (calibrate takes *.txt in name order, so it starts right after the haystack's).
std::filesystem::path calibration_folder(const Tokenizer& tokenizer, int context_length) {
  size_t files_used = 0;
  haystack_tokens(tokenizer, context_length, files_used);
  const std::vector<std::filesystem::path> files = essay_files();
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / "kvb_decode_niah_calibration";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  for (size_t i = files_used; i < files.size(); ++i)
    std::filesystem::create_symlink(files[i], folder / files[i].filename());
  return folder;
}

struct Method {
  std::string label;
  std::string policy;
  nlohmann::json params;
  int min_answered;  // CI samples (of kCiDepths.size()) that must score 1.0
};

// The CI run's needle depths (percent). SmolLM2 itself answers (Full KV, 1839-token prompt) at
// depths 50 and 56 but ends with EOS right away at 0, 11, 22 and 33
// (results/decode-methods-smollm2.md), so the CI run checks the methods where Full answers.
constexpr std::array<int, 2> kCiDepths = {50, 56};

// ART's probe/oracle agreement is traced on the full+art walks at this relative-error tolerance.
constexpr double kOracleTolerance = 1e-2;

// full+art at one ART setting, traced against the oracle.
Method art_method(const std::string& label, nlohmann::json art) {
  art["oracle_tolerance"] = kOracleTolerance;
  return {label, "full+art", {{"art", art}}, 0};
}

// The CI list: every decode-time method at 10%, with the thresholds below.
std::vector<Method> ci_methods(const std::filesystem::path& projection) {
  // Thresholds: the measured CI run answered 2/2 with Full, TOPK and the three BinaryPC variants,
  // 1/2 with MagicPIG and full+art, 0/2 with Quest, snapkv+art and streamingllm+art; one sample of
  // margin where a method answered both.
  return {
      {"full", "full", nlohmann::json::object(), 2},
      {"topk", "topk", nlohmann::json::object(), 2},
      {"quest", "quest", nlohmann::json::object(), 0},
      {"magicpig", "magicpig", nlohmann::json::object(), 0},
      {"binarypc (online)", "binarypc", nlohmann::json::object(), 1},
      {"binarypc (OPC)", "binarypc", {{"projection", projection.string()}}, 1},
      {"binarypc (no EAS)", "binarypc", {{"eas", false}}, 1},
      art_method("full+art", nlohmann::json::object()),
      {"snapkv+art", "snapkv+art", nlohmann::json::object(), 0},
      {"streamingllm+art", "streamingllm+art", nlohmann::json::object(), 0},
  };
}

// The ART sweep (issue 8): the seed's thresholds (tau 1e-5, phi 1e-3) at the patience sweep
// {1, 2, 4, 8} of docs/methods.md §13, each threshold a decade stricter, and the walk without
// termination (p = inf).
std::vector<Method> art_sweep_methods() {
  return {
      {"full", "full", nlohmann::json::object(), 0},
      art_method("art no stop", {{"enabled", false}}),
      art_method("art p1", {{"patience", 1}}),
      art_method("art p2 (default)", nlohmann::json::object()),
      art_method("art p4", {{"patience", 4}}),
      art_method("art p8", {{"patience", 8}}),
      art_method("art p2 tau1e-6", {{"tau", 1e-6}}),
      art_method("art p2 phi1e-4", {{"phi", 1e-4}}),
      art_method("art p2 tau1e-6 phi1e-4", {{"tau", 1e-6}, {"phi", 1e-4}}),
      art_method("art p4 tau1e-6", {{"patience", 4}, {"tau", 1e-6}}),
      // Not the spec's settings, diagnostics of the premature stops: a first block of a whole
      // tile (positions 0..63, the prompt's opening tokens walked first) and the norm criterion.
      art_method("art p2 sink64", {{"sink_tokens", 64}}),
      art_method("art p2 norm", {{"scale_criterion", "norm"}}),
  };
}

std::vector<int> depths_from_environment() {
  std::vector<int> depths;
  if (const char* list = std::getenv("KVB_NIAH_DEPTHS")) {
    std::istringstream in(list);
    for (std::string item; std::getline(in, item, ',');)
      if (!item.empty()) depths.push_back(std::clamp(std::atoi(item.c_str()), 0, 100));
    return depths;
  }
  if (std::getenv("KVB_NIAH_SAMPLES")) {
    const int n = env_int("KVB_NIAH_SAMPLES", 10, 1);
    for (int s = 0; s < n; ++s)
      depths.push_back(n == 1 ? 50 : static_cast<int>(std::lround(100.0 * s / (n - 1))));
    return depths;
  }
  return {kCiDepths.begin(), kCiDepths.end()};
}

void print_oracle_row(const std::string& label, const kernels::EarlyExitOracleSummary& oracle) {
  std::printf("| %s | %lld | %.1f%% | %.1f%% | %.2e | %.2f%% | %.2f%% | %.2f%% | %.1f%% |\n",
              label.c_str(), static_cast<long long>(oracle.walks),
              oracle.walks ? 100.0 * oracle.probe_stops / oracle.walks : 0.0,
              oracle.probe_stops ? 100.0 * oracle.premature_stops / oracle.probe_stops : 0.0,
              oracle.probe_stops ? oracle.relative_error_at_stop_sum / oracle.probe_stops : 0.0,
              oracle.boundaries ? 100.0 * oracle.agreements / oracle.boundaries : 0.0,
              oracle.boundaries ? 100.0 * oracle.false_positives / oracle.boundaries : 0.0,
              oracle.boundaries ? 100.0 * oracle.false_negatives / oracle.boundaries : 0.0,
              100.0 * oracle.safely_skippable_fraction());
}

TEST(DecodeNiah, MethodsAnswerAtTenPercentBudgets) {
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
  const LoadedModel model = load_model(test::default_model_path().string());
  const std::shared_ptr<const Tokenizer> tokenizer =
      model.tokenizer ? model.tokenizer
                      : std::shared_ptr<const Tokenizer>(
                            tokenizer_from_path(test::default_model_path().string()));
  // CI: kCiDepths and the per-method thresholds; by hand: other depths or the ART sweep, no
  // thresholds.
  const bool art_sweep = std::getenv("KVB_NIAH_ART_SWEEP") != nullptr;
  const bool ci_run = !art_sweep && std::getenv("KVB_NIAH_SAMPLES") == nullptr &&
                      std::getenv("KVB_NIAH_DEPTHS") == nullptr;
  const std::vector<int> depths = depths_from_environment();
  ASSERT_FALSE(depths.empty()) << "KVB_NIAH_DEPTHS lists no depth";
  const int samples = static_cast<int>(depths.size());
  const int context_length = env_int("KVB_NIAH_LENGTH", 2000, 400);

  // OPC: a projection calibrated through `kvbench calibrate` on essays the haystack does not use.
  const std::filesystem::path calibration = calibration_folder(*tokenizer, context_length);
  const std::filesystem::path projection =
      std::filesystem::temp_directory_path() / "kvb_decode_niah_proj.bin";
  if (!art_sweep) {
    ASSERT_EQ(cli::calibrate({"--model", test::default_model_path().string(), "--data",
                              calibration.string(), "--out", projection.string(), "--max-tokens",
                              "2048", "--json"}),
              0);
  }
  const std::vector<Method> methods = art_sweep ? art_sweep_methods() : ci_methods(projection);
  const std::optional<Budget> budget = Budget::parse("10%");
  std::vector<CachePlan> plans;
  CaptureRequest request;
  for (const Method& method : methods) {
    plans.push_back(make_cache_plan(
        method.policy, method.params,
        method.policy == "full" || method.policy == "full+art" ? std::nullopt : budget));
    if (plans.back().prefill) request.merge(plans.back().prefill->capture());
  }

  CpuEngine engine(*model.weights);
  Generator generator(engine, tokenizer.get());
  GenerationOptions options;
  options.max_new_tokens = 30;
  options.stop_strings = newline_after_text();
  std::vector<double> score(methods.size(), 0.0), decode_ms(methods.size(), 0.0);
  std::vector<int> answered(methods.size(), 0), steps(methods.size(), 0);
  std::vector<int64_t> visited(methods.size(), 0), total(methods.size(), 0);
  std::vector<kernels::EarlyExitOracleSummary> oracle(methods.size());
  int prompt_tokens = 0;
  double prefill_ms = 0;
  for (const int depth : depths) {
    const std::string prompt = niah_prompt(context_with_needle(*tokenizer, context_length, depth));
    const std::vector<TokenId> ids =
        tokenizer->encode(prompt, tokenizer->adds_bos_by_default(), true);
    prompt_tokens = static_cast<int>(ids.size());
    const PrefillSnapshot snapshot = generator.prefill(ids, request);  // once per sample
    prefill_ms += snapshot.prefill_ms;
    for (size_t m = 0; m < methods.size(); ++m) {
      const GenerationResult result =
          generator.continue_generation(snapshot, plans[m], {}, options);
      const std::string answer = first_non_blank_line(tokenizer->decode(result.output_ids, true));
      const double sample_score = needle_score(answer);
      score[m] += sample_score / samples;
      answered[m] += sample_score == 1.0 ? 1 : 0;
      decode_ms[m] += result.decode_ms;
      steps[m] += std::max(0, result.output_tokens - 1);
      visited[m] += result.kv_blocks_visited;
      total[m] += result.kv_blocks_total;
      oracle[m].add(result.early_exit_oracle);
      std::string raw = tokenizer->decode(result.output_ids, true);  // newlines shown as \n
      for (size_t at = raw.find('\n'); at != std::string::npos; at = raw.find('\n', at + 2))
        raw.replace(at, 1, "\\n");
      std::printf("depth %3d  %-18s %.2f  %-6s %s\n", depth, methods[m].label.c_str(), sample_score,
                  result.stop_reason.c_str(), raw.c_str());
      std::fflush(stdout);
    }
  }
  std::filesystem::remove(projection);
  std::filesystem::remove_all(calibration);

  std::string depth_list;
  for (const int depth : depths) {
    if (!depth_list.empty()) depth_list += ',';
    depth_list += std::to_string(depth);
  }
  std::printf(
      "\nNIAH (KVCache-Factory protocol), %d samples (depths %s), %d-token prompts, budget "
      "10%%, prefill %.0f ms per sample\n",
      samples, depth_list.c_str(), prompt_tokens, prefill_ms / samples);
  std::printf(
      "| method | mean score | samples answered (score 1.0) | KV blocks skipped by ART | "
      "ms per decode step |\n|---|---|---|---|---|\n");
  for (size_t m = 0; m < methods.size(); ++m) {
    char skipped[32] = "-";
    if (total[m] > 0)
      std::snprintf(skipped, sizeof skipped, "%.1f%%",
                    100.0 * (1.0 - static_cast<double>(visited[m]) / total[m]));
    std::printf("| %s | %.2f | %d/%d | %s | %.1f |\n", methods[m].label.c_str(), score[m],
                answered[m], samples, skipped, steps[m] > 0 ? decode_ms[m] / steps[m] : 0.0);
  }
  // Probe/oracle agreement per ART row (ART Table 4's comparison): the probe's stop decision
  // against "the running output is already within the tolerance of the full output".
  std::printf(
      "\nART probe/oracle (tolerance %.0e relative L2, max over the KV group's heads): walks, "
      "share the probe stopped, premature stops (error still >= tolerance) among stops, "
      "mean error at stop; per block boundary: agreement, false positives (probe stops, "
      "error too large), false negatives; blocks a perfect probe could skip (the error "
      "stays under the tolerance from its stop on)\n",
      kOracleTolerance);
  std::printf(
      "| setting | walks | probe stopped | premature | mean error at stop | agreement | "
      "false pos. | false neg. | oracle could skip |\n|---|---|---|---|---|---|---|---|---|\n");
  int art_row = -1;
  for (size_t m = 0; m < methods.size(); ++m) {
    if (oracle[m].walks == 0) continue;
    print_oracle_row(methods[m].label, oracle[m]);
    if (methods[m].label == "full+art") art_row = static_cast<int>(m);
  }

  if (ci_run) {
    for (size_t m = 0; m < methods.size(); ++m)
      EXPECT_GE(answered[m], methods[m].min_answered) << methods[m].label;
    ASSERT_GE(art_row, 0);
    EXPECT_GT(oracle[art_row].walks, 0);
    EXPECT_GT(oracle[art_row].boundaries, 0);
    EXPECT_GT(total[art_row], 0);
    EXPECT_LT(visited[art_row], total[art_row]) << "ART skips blocks on a real cache";
  }
}

}  // namespace
}  // namespace kvb
