// Regression check of a candidate database against a baseline (a database or a committed JSON
// summary such as results/ci-baseline.json).
//
// Two kinds of checks:
//   accuracy  per (model, policy, budget, prompt mode, benchmark, task), mean score in points over
//             all samples and lengths; a drop of more than `max_accuracy_drop` points fails.
//   latency   per (model, policy, budget, prompt mode), TPOT of the policy divided by TPOT of Full
//             in the same database (ratios travel across machines, absolute times do not); a
//             candidate ratio above baseline ratio x `max_latency_ratio` fails.
// An entry of the baseline that the candidate lacks fails too (lost coverage is a regression).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/report/tables.h"
#include "harness/sweep/store.h"

namespace kvb {

// {"format": "kvbench-summary", "version": 1, "accuracy": [...], "latency": [...]}
nlohmann::json summarize_results(const std::vector<StoredRow>& rows);
// Reads a database or a summary JSON file (detected by content).
nlohmann::json load_summary(const std::filesystem::path& path);

struct CompareOptions {
  double max_accuracy_drop = 5.0;  // points
  double max_latency_ratio = 1.5;  // factor over the baseline's policy/Full TPOT ratio
};

struct CompareResult {
  TextTable diff;  // one row per compared entry
  int regressions = 0;
  int compared = 0;
  nlohmann::json to_json() const;
};

CompareResult compare_summaries(const nlohmann::json& baseline, const nlohmann::json& candidate,
                                const CompareOptions& options);

}  // namespace kvb
