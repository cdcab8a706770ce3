// See paired.h.
#include "harness/report/paired.h"

#include <map>
#include <set>
#include <tuple>

#include "common/errors.h"
#include "common/strings.h"
#include "harness/report/stats.h"
#include "harness/sweep/config.h"

namespace kvb {
namespace {

// One table's rows share model, benchmark and prompt mode; a sample is (task, sample index).
using TableKey = std::tuple<std::string, std::string, std::string>;  // model, benchmark, mode
using SampleKey = std::pair<std::string, int>;                       // task, sample index
using ScoresBySample = std::map<SampleKey, double>;

struct Scores {
  // (label, budget text) -> length -> sample -> score; first-seen order of (label, budget) kept.
  std::map<std::pair<std::string, std::string>, std::map<int, ScoresBySample>> by_policy;
  std::vector<std::pair<std::string, std::string>> order;
  std::set<int> lengths;
};

// "+12.7* (+8.1 to +17.3) n=150": points, the interval, the pairs.
std::string difference_cell(const std::vector<double>& differences) {
  if (differences.empty()) return "-";
  const MeanCi s = mean_ci(differences, -1, 1);
  auto signed_points = [](double value) {
    const std::string text = fixed(100 * value, 1);
    return value > 0 && text != "0.0" ? "+" + text : text;
  };
  std::string text = signed_points(s.mean);
  if (s.has_interval && (s.low > 0 || s.high < 0)) text += "*";
  if (s.has_interval) text += " (" + signed_points(s.low) + " to " + signed_points(s.high) + ")";
  return text + " n=" + std::to_string(s.n);
}

std::vector<double> paired_differences(const ScoresBySample& policy,
                                       const ScoresBySample& reference) {
  std::vector<double> differences;
  for (const auto& [sample, score] : policy) {
    const auto it = reference.find(sample);
    if (it != reference.end()) differences.push_back(score - it->second);
  }
  return differences;
}

TextTable paired_table(const TableKey& key, const Scores& scores, const std::string& reference) {
  const auto& [model, benchmark, mode] = key;
  TextTable table;
  table.title = benchmark + ", " + model + ", " + mode + ": paired difference against " +
                reference + " (points; * the 95% interval excludes 0)";
  table.columns = {"Policy", "Budget"};
  for (const int length : scores.lengths) table.columns.push_back(std::to_string(length));
  for (const auto& [label, budget] : scores.order) {
    if (label == reference) continue;
    auto ref = scores.by_policy.find({reference, budget});
    if (ref == scores.by_policy.end()) ref = scores.by_policy.find({reference, ""});
    if (ref == scores.by_policy.end()) continue;  // no reference at this budget, none budget-less
    const auto& mine = scores.by_policy.at({label, budget});
    std::vector<std::string> line = {label, budget_label(budget)};
    bool paired = false;
    for (const int length : scores.lengths) {
      const auto a = mine.find(length);
      const auto b = ref->second.find(length);
      std::vector<double> differences;
      if (a != mine.end() && b != ref->second.end())
        differences = paired_differences(a->second, b->second);
      paired |= !differences.empty();
      line.push_back(difference_cell(differences));
    }
    if (paired) table.rows.push_back(line);
  }
  return table;
}

}  // namespace

std::vector<TextTable> build_paired_tables(const std::vector<StoredRow>& rows,
                                           const std::string& reference) {
  std::vector<TableKey> order;
  std::map<TableKey, Scores> tables;
  std::set<std::string> labels;
  for (const StoredRow& row : rows) {
    const std::string label = row.cell.policy_label();
    labels.insert(label);
    const TableKey key{row.cell.model, row.cell.benchmark, to_string(row.cell.prompt_mode)};
    if (!tables.count(key)) order.push_back(key);
    Scores& scores = tables[key];
    const std::pair<std::string, std::string> policy{label, row.cell.budget_text()};
    if (!scores.by_policy.count(policy)) scores.order.push_back(policy);
    scores.by_policy[policy][row.cell.length][{row.cell.task, row.sample_index}] = row.result.score;
    scores.lengths.insert(row.cell.length);
  }
  if (!rows.empty() && !labels.count(reference))
    throw InputError("--against '" + reference +
                     "': no result row has that policy (present: " + join(labels, ", ") + ")");
  std::vector<TextTable> out;
  for (const TableKey& key : order) {
    TextTable table = paired_table(key, tables.at(key), reference);
    if (!table.rows.empty()) out.push_back(std::move(table));
  }
  return out;
}

}  // namespace kvb
