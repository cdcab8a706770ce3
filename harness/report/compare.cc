#include "harness/report/compare.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "common/errors.h"
#include "harness/report/stats.h"

namespace kvb {
namespace {

double mean(const std::vector<double>& values) {
  if (values.empty()) return NAN;
  double sum = 0;
  for (const double v : values) sum += v;
  return sum / values.size();
}

std::string accuracy_key(const nlohmann::json& e) {
  return e.at("model").get<std::string>() + " | " + e.at("policy").get<std::string>() + " | " +
         e.at("budget").get<std::string>() + " | " + e.at("prompt_mode").get<std::string>() +
         " | " + e.at("benchmark").get<std::string>() + "/" + e.at("task").get<std::string>();
}

std::string latency_key(const nlohmann::json& e) {
  return e.at("model").get<std::string>() + " | " + e.at("policy").get<std::string>() + " | " +
         e.at("budget").get<std::string>() + " | " + e.at("prompt_mode").get<std::string>();
}

void check_summary(const nlohmann::json& summary, const std::string& what) {
  if (!summary.is_object() || summary.value("format", "") != "kvbench-summary" ||
      !summary.contains("accuracy") || !summary.contains("latency"))
    throw FormatError(what +
                      " is not a kvbench summary (expected {\"format\": "
                      "\"kvbench-summary\", \"accuracy\": [...], \"latency\": [...]}); write one "
                      "with `kvbench compare --candidate DB --write-baseline FILE.json`");
}

// How one compared value changed (the diff's Change column) and whether that is a regression. The
// judges append the number to a prefix: `"x" + fixed(...)` inlined into them sets off a false
// GCC 12 -Wrestrict warning.
struct Verdict {
  std::string change;
  bool regressed = false;
};

// One section of the summaries compared: every baseline entry must be in the candidate (a missing
// one is a regression), and `judge` gives the verdict on the two values.
struct SectionCheck {
  const char* section;  // the summary's list
  const char* label;    // the diff's Check column
  const char* field;    // the compared number of an entry
  int digits;
  std::string (*key)(const nlohmann::json& entry);
  std::function<Verdict(double before, double after)> judge;
};

void compare_section(const nlohmann::json& baseline, const nlohmann::json& candidate,
                     const SectionCheck& check, CompareResult& result) {
  std::map<std::string, nlohmann::json> candidates;
  for (const auto& e : candidate[check.section]) candidates[check.key(e)] = e;
  for (const auto& base : baseline[check.section]) {
    const std::string key = check.key(base);
    const double before = base.at(check.field).get<double>();
    ++result.compared;
    const auto it = candidates.find(key);
    if (it == candidates.end()) {
      ++result.regressions;
      result.diff.rows.push_back(
          {check.label, key, fixed(before, check.digits), "missing", "-", "REGRESSION"});
      continue;
    }
    const double after = it->second.at(check.field).get<double>();
    const Verdict verdict = check.judge(before, after);
    result.regressions += verdict.regressed;
    result.diff.rows.push_back({check.label, key, fixed(before, check.digits),
                                fixed(after, check.digits), verdict.change,
                                verdict.regressed ? "REGRESSION" : "ok"});
  }
}

}  // namespace

nlohmann::json summarize_results(const std::vector<StoredRow>& rows) {
  using AccKey =
      std::tuple<std::string, std::string, std::string, std::string, std::string, std::string>;
  using LatKey = std::tuple<std::string, std::string, std::string, std::string>;
  std::map<AccKey, std::vector<double>> scores;
  std::map<LatKey, std::vector<double>> tpot;
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<double>> full_tpot;
  for (const auto& row : rows) {
    const Cell& c = row.cell;
    const std::string mode = to_string(c.prompt_mode);
    scores[{c.model, c.policy_label(), c.budget_text(), mode, c.benchmark, c.task}].push_back(
        row.result.score);
    if (row.result.tokens_out < 2) continue;  // TPOT needs two tokens
    tpot[{c.model, c.policy_label(), c.budget_text(), mode}].push_back(row.result.tpot_ms);
    if (c.policy == "full") full_tpot[{c.model, mode, ""}].push_back(row.result.tpot_ms);
  }
  nlohmann::json accuracy = nlohmann::json::array();
  for (const auto& [k, v] : scores) {
    const auto& [model, policy, budget, mode, benchmark, task] = k;
    accuracy.push_back({{"model", model},
                        {"policy", policy},
                        {"budget", budget},
                        {"prompt_mode", mode},
                        {"benchmark", benchmark},
                        {"task", task},
                        {"score", std::round(1e4 * mean(v)) / 1e2},
                        {"samples", v.size()}});
  }
  nlohmann::json latency = nlohmann::json::array();
  for (const auto& [k, v] : tpot) {
    const auto& [model, policy, budget, mode] = k;
    if (policy == "full") continue;
    const auto full = full_tpot.find({model, mode, ""});
    if (full == full_tpot.end()) continue;
    latency.push_back({{"model", model},
                       {"policy", policy},
                       {"budget", budget},
                       {"prompt_mode", mode},
                       {"tpot_ratio_vs_full", std::round(1e4 * mean(v) / mean(full->second)) / 1e4},
                       {"tpot_ms", std::round(1e3 * mean(v)) / 1e3}});
  }
  return {
      {"format", "kvbench-summary"}, {"version", 1}, {"accuracy", accuracy}, {"latency", latency}};
}

nlohmann::json load_summary(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read " + path.string() + " (check the path)");
  char magic[16] = {};
  in.read(magic, sizeof magic);
  if (std::string(magic, in.gcount()) == std::string("SQLite format 3\0", 16)) {
    ResultStore store(path, ResultStore::Mode::kReadOnly);
    return summarize_results(store.load_rows());
  }
  in.clear();
  in.seekg(0);
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw FormatError(path.string() + " is neither a kvbench database nor JSON: " + e.what());
  }
  check_summary(summary, path.string());
  return summary;
}

nlohmann::json CompareResult::to_json() const {
  return {{"compared", compared},
          {"regressions", regressions},
          {"columns", diff.columns},
          {"rows", diff.rows}};
}

CompareResult compare_summaries(const nlohmann::json& baseline, const nlohmann::json& candidate,
                                const CompareOptions& options) {
  check_summary(baseline, "the baseline");
  check_summary(candidate, "the candidate");
  CompareResult result;
  result.diff.title = "kvbench compare";
  result.diff.columns = {"Check", "Entry", "Baseline", "Candidate", "Change", "Status"};
  compare_section(
      baseline, candidate,
      {"accuracy", "accuracy", "score", 2, accuracy_key,
       [&](double before, double after) {
         const double change = after - before;
         Verdict verdict{change >= 0 ? "+" : "", -change > options.max_accuracy_drop + 1e-9};
         verdict.change += fixed(change, 2);
         return verdict;
       }},
      result);
  compare_section(baseline, candidate,
                  {"latency", "TPOT/Full", "tpot_ratio_vs_full", 3, latency_key,
                   [&](double before, double after) {
                     Verdict verdict{"x", after > before * options.max_latency_ratio};
                     verdict.change += fixed(after / before, 2);
                     return verdict;
                   }},
                  result);
  return result;
}

}  // namespace kvb
