// Paper-style tables from stored results.
//
// Layouts: one per benchmark of the registry (datasets/registry.h), named after it, in the form
// the benchmark declares (TableLayout):
//   per task       per (model, prompt mode, length): rows policy x budget, one column per task in
//                  the official order, then the plain mean of task scores (RULER, InfiniteBench;
//                  like BinaryPC Tables 14-18)
//   categories     per (model, prompt mode): one column per dataset grouped by category, then the
//                  category means, the mean of datasets and the mean of category means (LongBench,
//                  Table 9)
//   depth grid     per (model, prompt mode, policy, budget): depth x context length (NIAH)
// and, for each per-task benchmark, NAME-lengths: per (model, prompt mode), rows policy x budget,
// one column per context length holding the per-task table's Avg at that length, then their mean;
// and two more:
//   latency        per model: prefill, compression, TTFT and TPOT per policy x budget x length,
//                  with speed-ups against each policy's base (a stacked X+M against X; others
//                  against Full) measured in the same database (like ART Table 1)
//   memory         per model: kept entries, KV bytes (and their share of Full's) and peak memory
// Accuracy cells read "mean ±h" where h is the 95% CI half width, for fewer than kShowCiBelow
// samples.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/sweep/store.h"

namespace kvb {

struct TextTable {
  std::string title;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

const std::vector<std::string>& table_layouts();
// Throws InputError for an unknown layout; an empty vector when the database has no rows for it.
std::vector<TextTable> build_tables(const std::vector<StoredRow>& rows, const std::string& layout);

// md | csv | latex (InputError otherwise).
std::string render_tables(const std::vector<TextTable>& tables, const std::string& format);
nlohmann::json tables_to_json(const std::vector<TextTable>& tables);

// Task orders of the benchmarks (official order first, unknown tasks after, sorted).
std::vector<std::string> ordered_tasks(const std::string& benchmark,
                                       const std::vector<std::string>& present);
// LongBench category of a dataset ("SD-QA", "MD-QA", "Sum", "Few-shot", "Synth", "Code").
std::string longbench_category(const std::string& dataset);
// The base a latency row is compared with: the base of a stacked "base+modifier" ("snapkv" for
// "snapkv+art"), "full" otherwise.
std::string latency_base_policy(const std::string& policy);
// Budget "" (budget-less policies) reads "full" in tables.
std::string budget_label(const std::string& budget);

}  // namespace kvb
