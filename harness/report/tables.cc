#include "harness/report/tables.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/registry.h"
#include "harness/report/stats.h"

namespace kvb {
namespace {

// LongBench v1's categories (`LongBench/README.md`), in the short names of the KV papers' tables.
const std::vector<std::pair<std::string, std::string>> kLongBench = {
    {"narrativeqa", "SD-QA"},
    {"qasper", "SD-QA"},
    {"multifieldqa_en", "SD-QA"},
    {"multifieldqa_zh", "SD-QA"},
    {"hotpotqa", "MD-QA"},
    {"2wikimqa", "MD-QA"},
    {"musique", "MD-QA"},
    {"dureader", "MD-QA"},
    {"gov_report", "Sum"},
    {"qmsum", "Sum"},
    {"multi_news", "Sum"},
    {"vcsum", "Sum"},
    {"trec", "Few-shot"},
    {"triviaqa", "Few-shot"},
    {"samsum", "Few-shot"},
    {"lsht", "Few-shot"},
    {"passage_count", "Synth"},
    {"passage_retrieval_en", "Synth"},
    {"passage_retrieval_zh", "Synth"},
    {"lcc", "Code"},
    {"repobench-p", "Code"}};
const std::vector<std::string> kLongBenchCategories = {"SD-QA",    "MD-QA", "Sum",
                                                       "Few-shot", "Synth", "Code"};

// Scores are stored as fractions; tables show points (x100). Below kShowCiBelow samples the cell
// adds the 95% interval, "75.0 (30.1–95.4)" (harness/report/stats.h: Wilson for 0/1 scores, Student
// t clipped to [0, 100] otherwise), or "(n=2)" where there are too few samples for one.
std::string accuracy_cell(const std::vector<double>& scores) {
  if (scores.empty()) return "-";
  const MeanCi s = mean_ci(scores);
  std::string text = fixed(100 * s.mean, 1);
  if (s.n >= kShowCiBelow || s.n == 1) return text;
  if (!s.has_interval) return text + " (n=" + std::to_string(s.n) + ")";
  return text + " (" + fixed(100 * s.low, 1) + "–" + fixed(100 * s.high, 1) + ")";
}

double mean_of(const std::vector<double>& values) {
  if (values.empty()) return NAN;
  double sum = 0;
  for (const double v : values) sum += v;
  return sum / values.size();
}

// Keeps first-appearance order of keys (rows arrive in config order).
template <typename Key>
class OrderedKeys {
 public:
  void add(const Key& key) {
    if (seen_.insert(key).second) order_.push_back(key);
  }
  const std::vector<Key>& items() const { return order_; }

 private:
  std::set<Key> seen_;
  std::vector<Key> order_;
};

// What rows of one table share, and what distinguishes rows within it.
struct PolicyRow {
  std::string label;  // policy label
  std::string budget;
  bool operator<(const PolicyRow& o) const {
    return std::tie(label, budget) < std::tie(o.label, o.budget);
  }
};

std::string mode_text(PromptMode mode) { return to_string(mode); }

// "ruler-lengths": a per-task benchmark's scores by length (length_summary_tables).
constexpr std::string_view kByLengthSuffix = "-lengths";

std::vector<TextTable> per_task_tables(const std::vector<StoredRow>& rows,
                                       const std::string& benchmark, const std::string& name,
                                       bool per_length) {
  using GroupKey = std::tuple<std::string, std::string, int>;  // model, mode, length
  OrderedKeys<GroupKey> groups;
  std::map<GroupKey, OrderedKeys<PolicyRow>> policy_rows;
  std::map<GroupKey, std::set<std::string>> tasks;
  std::map<std::tuple<GroupKey, PolicyRow, std::string>, std::vector<double>> scores;
  for (const auto& row : rows) {
    if (row.cell.benchmark != benchmark) continue;
    const GroupKey g{row.cell.model, mode_text(row.cell.prompt_mode),
                     per_length ? row.cell.length : 0};
    const PolicyRow p{row.cell.policy_label(), row.cell.budget_text()};
    groups.add(g);
    policy_rows[g].add(p);
    tasks[g].insert(row.cell.task);
    scores[{g, p, row.cell.task}].push_back(row.result.score);
  }
  std::vector<TextTable> tables;
  for (const auto& g : groups.items()) {
    const auto& [model, mode, length] = g;
    TextTable table;
    table.title = name + ", " + model + ", " + mode +
                  (per_length ? ", " + std::to_string(length) + " tokens" : "");
    const auto task_order =
        ordered_tasks(benchmark, std::vector<std::string>(tasks[g].begin(), tasks[g].end()));
    table.columns = {"Policy", "Budget"};
    for (const auto& t : task_order) table.columns.push_back(t);
    table.columns.push_back("Avg");
    for (const auto& p : policy_rows[g].items()) {
      std::vector<std::string> line = {p.label, budget_label(p.budget)};
      std::vector<double> task_means;
      for (const auto& t : task_order) {
        const auto it = scores.find({g, p, t});
        if (it == scores.end()) {
          line.push_back("-");
          continue;
        }
        line.push_back(accuracy_cell(it->second));
        task_means.push_back(mean_of(it->second));
      }
      line.push_back(fixed(100 * mean_of(task_means), 1));
      table.rows.push_back(std::move(line));
    }
    tables.push_back(std::move(table));
  }
  return tables;
}

// The per-task tables' Avg column across lengths: per (model, prompt mode), rows policy x budget,
// one column per context length holding the mean of that length's task scores (the same figure as
// the Avg of the per-length table), then their mean where every length is present — the form of
// the KV papers' headline RULER tables (score per length, averaged over tasks).
std::vector<TextTable> length_summary_tables(const std::vector<StoredRow>& rows,
                                             const Benchmark& benchmark) {
  using GroupKey = std::pair<std::string, std::string>;  // model, mode
  OrderedKeys<GroupKey> groups;
  std::map<GroupKey, OrderedKeys<PolicyRow>> policy_rows;
  std::map<GroupKey, std::set<int>> lengths;
  // (group, row, length) -> task -> scores
  std::map<std::tuple<GroupKey, PolicyRow, int>, std::map<std::string, std::vector<double>>> scores;
  for (const auto& row : rows) {
    if (row.cell.benchmark != benchmark.name) continue;
    const GroupKey g{row.cell.model, mode_text(row.cell.prompt_mode)};
    const PolicyRow p{row.cell.policy_label(), row.cell.budget_text()};
    groups.add(g);
    policy_rows[g].add(p);
    lengths[g].insert(row.cell.length);
    scores[{g, p, row.cell.length}][row.cell.task].push_back(row.result.score);
  }
  std::vector<TextTable> tables;
  for (const auto& g : groups.items()) {
    TextTable table;
    table.title = benchmark.title + " by length, " + g.first + ", " + g.second +
                  " (mean of the task scores at each length)";
    table.columns = {"Policy", "Budget"};
    for (const int length : lengths[g]) table.columns.push_back(std::to_string(length));
    table.columns.push_back("Avg");
    for (const auto& p : policy_rows[g].items()) {
      std::vector<std::string> line = {p.label, budget_label(p.budget)};
      std::vector<double> length_means;
      for (const int length : lengths[g]) {
        const auto it = scores.find({g, p, length});
        if (it == scores.end()) {
          line.push_back("-");
          continue;
        }
        std::vector<double> task_means;
        for (const auto& [task, task_scores] : it->second)
          task_means.push_back(mean_of(task_scores));
        length_means.push_back(mean_of(task_means));
        line.push_back(fixed(100 * length_means.back(), 1));
      }
      line.push_back(
          length_means.size() == lengths[g].size() ? fixed(100 * mean_of(length_means), 1) : "-");
      table.rows.push_back(std::move(line));
    }
    tables.push_back(std::move(table));
  }
  return tables;
}

std::vector<TextTable> category_tables(const std::vector<StoredRow>& rows,
                                       const Benchmark& benchmark) {
  // model, mode, prompt limit (0: the model's own; other limits get their own table)
  using GroupKey = std::tuple<std::string, std::string, int>;
  OrderedKeys<GroupKey> groups;
  std::map<GroupKey, OrderedKeys<PolicyRow>> policy_rows;
  std::map<GroupKey, std::set<std::string>> datasets;
  std::map<std::tuple<GroupKey, PolicyRow, std::string>, std::vector<double>> scores;
  for (const auto& row : rows) {
    if (row.cell.benchmark != benchmark.name) continue;
    const GroupKey g{row.cell.model, mode_text(row.cell.prompt_mode), row.cell.length};
    const PolicyRow p{row.cell.policy_label(), row.cell.budget_text()};
    groups.add(g);
    policy_rows[g].add(p);
    datasets[g].insert(row.cell.task);
    scores[{g, p, row.cell.task}].push_back(row.result.score);
  }
  std::vector<TextTable> tables;
  for (const auto& g : groups.items()) {
    TextTable table;
    const auto& [model, mode, limit] = g;
    table.title = benchmark.title + ", " + model + ", " + mode +
                  (limit > 0 ? ", prompts truncated to " + std::to_string(limit) + " tokens" : "");
    const auto order = ordered_tasks(
        benchmark.name, std::vector<std::string>(datasets[g].begin(), datasets[g].end()));
    std::vector<std::string> categories;
    for (const auto& c : kLongBenchCategories)
      for (const auto& d : order)
        if (longbench_category(d) == c) {
          categories.push_back(c);
          break;
        }
    table.columns = {"Policy", "Budget"};
    for (const auto& d : order) table.columns.push_back(d);
    for (const auto& c : categories) table.columns.push_back(c + " avg");
    table.columns.push_back("Avg");
    table.columns.push_back("Avg of categories");
    for (const auto& p : policy_rows[g].items()) {
      std::vector<std::string> line = {p.label, budget_label(p.budget)};
      std::vector<double> dataset_means;
      std::map<std::string, std::vector<double>> by_category;
      for (const auto& d : order) {
        const auto it = scores.find({g, p, d});
        if (it == scores.end()) {
          line.push_back("-");
          continue;
        }
        line.push_back(accuracy_cell(it->second));
        dataset_means.push_back(mean_of(it->second));
        by_category[longbench_category(d)].push_back(mean_of(it->second));
      }
      std::vector<double> category_means;
      for (const auto& c : categories) {
        line.push_back(fixed(100 * mean_of(by_category[c]), 1));
        if (!by_category[c].empty()) category_means.push_back(mean_of(by_category[c]));
      }
      line.push_back(fixed(100 * mean_of(dataset_means), 1));
      line.push_back(fixed(100 * mean_of(category_means), 1));
      table.rows.push_back(std::move(line));
    }
    tables.push_back(std::move(table));
  }
  return tables;
}

std::vector<TextTable> depth_grid_tables(const std::vector<StoredRow>& rows,
                                         const Benchmark& benchmark) {
  using GroupKey = std::tuple<std::string, std::string, PolicyRow>;
  OrderedKeys<GroupKey> groups;
  std::map<GroupKey, std::set<double>> depths;
  std::map<GroupKey, std::set<int>> lengths;
  std::map<std::tuple<GroupKey, double, int>, std::vector<double>> scores;
  std::map<GroupKey, std::vector<double>> all;
  for (const auto& row : rows) {
    if (row.cell.benchmark != benchmark.name) continue;
    const GroupKey g{row.cell.model, mode_text(row.cell.prompt_mode),
                     PolicyRow{row.cell.policy_label(), row.cell.budget_text()}};
    groups.add(g);
    depths[g].insert(row.result.depth);
    lengths[g].insert(row.cell.length);
    scores[{g, row.result.depth, row.cell.length}].push_back(row.result.score);
    all[g].push_back(row.result.score);
  }
  std::vector<TextTable> tables;
  for (const auto& g : groups.items()) {
    const auto& [model, mode, p] = g;
    TextTable table;
    table.title = benchmark.title + ", " + model + ", " + mode + ", " + p.label + " @ " +
                  budget_label(p.budget) + " (mean " + fixed(100 * mean_of(all[g]), 1) + ")";
    table.columns = {"Depth %"};
    for (const int length : lengths[g]) table.columns.push_back(std::to_string(length));
    for (const double depth : depths[g]) {
      std::vector<std::string> line = {fixed(depth, 0)};
      for (const int length : lengths[g]) {
        const auto it = scores.find({g, depth, length});
        line.push_back(it == scores.end() ? "-" : accuracy_cell(it->second));
      }
      table.rows.push_back(std::move(line));
    }
    tables.push_back(std::move(table));
  }
  return tables;
}

struct Timing {
  std::vector<double> prefill, compress, ttft, tpot, kept, kv_bytes, peak;
  std::vector<SampleResult> batched;  // rows decoded with other cells

  // A cell without rows measured alone (an older database, or every row batched) shows the
  // batched rows' timings rather than nothing.
  void fall_back_to_batched() {
    if (!ttft.empty()) return;
    for (const SampleResult& r : batched) {
      prefill.push_back(r.prefill_ms);
      compress.push_back(r.compress_ms);
      ttft.push_back(r.ttft_ms);
      if (r.tokens_out > 1) tpot.push_back(r.tpot_ms);
      peak.push_back(static_cast<double>(r.peak_bytes));
    }
  }
};

bool measured_alone(const SampleResult& r) {
  return !r.extra.contains("decode_batch") || r.extra["decode_batch"] == 1;
}

std::vector<TextTable> latency_or_memory_tables(const std::vector<StoredRow>& rows, bool memory) {
  // Row key within a model: policy name (for the base lookup), label, budget, length, mode.
  using RowKey = std::tuple<std::string, std::string, std::string, int, std::string>;
  OrderedKeys<std::string> models;
  std::map<std::string, OrderedKeys<RowKey>> model_rows;
  std::map<std::pair<std::string, RowKey>, Timing> timing;
  // (model, policy name, budget, length, mode) -> means, for finding a row's base.
  std::map<std::tuple<std::string, std::string, std::string, int, std::string>, Timing*> by_name;
  for (const auto& row : rows) {
    const RowKey k{row.cell.policy, row.cell.policy_label(), row.cell.budget_text(),
                   row.cell.length, mode_text(row.cell.prompt_mode)};
    models.add(row.cell.model);
    model_rows[row.cell.model].add(k);
    Timing& t = timing[{row.cell.model, k}];
    // Latency is what a request sees alone: rows decoded in a batch of several cells (their step
    // time is the batch's) are left out of it when the cell has rows measured at batch 1.
    if (measured_alone(row.result)) {
      t.prefill.push_back(row.result.prefill_ms);
      t.compress.push_back(row.result.compress_ms);
      t.ttft.push_back(row.result.ttft_ms);
      if (row.result.tokens_out > 1) t.tpot.push_back(row.result.tpot_ms);
      // A cell's own peak (weights + its cache + workspaces) only where it ran alone: a batched
      // row records the peak of every cache in its batch.
      t.peak.push_back(static_cast<double>(row.result.peak_bytes));
    } else {
      t.batched.push_back(row.result);
    }
    t.kept.push_back(static_cast<double>(row.result.kept_entries));
    t.kv_bytes.push_back(static_cast<double>(row.result.kv_bytes));
  }
  for (auto& [key, t] : timing) {
    t.fall_back_to_batched();
    const auto& [policy, label, budget, length, mode] = key.second;
    by_name.emplace(std::make_tuple(key.first, policy, budget, length, mode), &t);
  }
  std::vector<TextTable> tables;
  constexpr double kMiB = 1024.0 * 1024.0;
  for (const auto& model : models.items()) {
    TextTable table;
    if (memory) {
      table.title = "Memory, " + model;
      table.columns = {"Policy",          "Budget", "Length",     "Prompt mode",
                       "Kept KV entries", "KV MiB", "KV vs Full", "Peak MiB"};
    } else {
      table.title = "Latency, " + model;
      table.columns = {"Policy",  "Budget",     "Length",        "Prompt mode",
                       "Samples", "Prefill ms", "Compress ms",   "TTFT ms",
                       "TPOT ms", "Base",       "TTFT speed-up", "TPOT speed-up"};
    }
    for (const auto& key : model_rows[model].items()) {
      const auto& [policy, label, budget, length, mode] = key;
      const Timing& t = timing[{model, key}];
      std::vector<std::string> line = {label, budget_label(budget), std::to_string(length), mode};
      if (memory) {
        const auto full = by_name.find({model, "full", "", length, mode});
        const double share =
            full == by_name.end() ? NAN : mean_of(t.kv_bytes) / mean_of(full->second->kv_bytes);
        line.push_back(fixed(mean_of(t.kept), 0));
        line.push_back(fixed(mean_of(t.kv_bytes) / kMiB, 2));
        line.push_back(std::isfinite(share) ? fixed(100 * share, 1) + "%" : "-");
        line.push_back(fixed(mean_of(t.peak) / kMiB, 1));
      } else {
        const std::string base = latency_base_policy(policy);
        const std::string base_budget = base == "full" ? "" : budget;
        const auto it = by_name.find({model, base, base_budget, length, mode});
        const double tpot = mean_of(t.tpot), ttft = mean_of(t.ttft);
        const double ttft_up = it == by_name.end() ? NAN : mean_of(it->second->ttft) / ttft;
        const double tpot_up = it == by_name.end() ? NAN : mean_of(it->second->tpot) / tpot;
        line.push_back(std::to_string(t.ttft.size()));
        line.push_back(fixed(mean_of(t.prefill), 1));
        line.push_back(fixed(mean_of(t.compress), 1));
        line.push_back(fixed(ttft, 1));
        line.push_back(fixed(tpot, 2));
        line.push_back(base + (base_budget.empty() ? "" : " " + base_budget));
        line.push_back(std::isfinite(ttft_up) ? fixed(ttft_up, 2) + "x" : "-");
        line.push_back(std::isfinite(tpot_up) ? fixed(tpot_up, 2) + "x" : "-");
      }
      table.rows.push_back(std::move(line));
    }
    tables.push_back(std::move(table));
  }
  return tables;
}

std::string escape_csv(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string escape_latex(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '_':
      case '%':
      case '&':
      case '#':
      case '$':
      case '{':
      case '}':
        out += '\\';
        out += c;
        break;
      case '~':
        out += "\\textasciitilde{}";
        break;
      case '^':
        out += "\\textasciicircum{}";
        break;
      case '\\':
        out += "\\textbackslash{}";
        break;
      default:
        out += c;
    }
  }
  // The interval's en dash is UTF-8 in the cells; LaTeX gets its own.
  for (size_t pos; (pos = out.find("–")) != std::string::npos;) out.replace(pos, 3, "--");
  return out;
}

std::string escape_markdown(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

const std::vector<std::string>& table_layouts() {
  static const std::vector<std::string> layouts = [] {
    std::vector<std::string> names;
    for (const auto& benchmark : list_benchmarks()) names.push_back(benchmark.name);
    for (const auto& benchmark : list_benchmarks())
      if (benchmark.layout == TableLayout::kPerTask)
        names.push_back(benchmark.name + std::string(kByLengthSuffix));
    names.push_back("latency");
    names.push_back("memory");
    return names;
  }();
  return layouts;
}

std::string longbench_category(const std::string& dataset) {
  std::string name = dataset;
  if (name.size() > 2 && name.substr(name.size() - 2) == "_e") name.resize(name.size() - 2);
  for (const auto& [d, c] : kLongBench)
    if (d == name) return c;
  return "Other";
}

std::string latency_base_policy(const std::string& policy) {
  // A stacked policy "base+modifier" (a decode-walk modifier on a cache policy, as the sweep
  // config's names stack them) against its base; any other against Full.
  const size_t plus = policy.rfind('+');
  if (plus != std::string::npos && plus > 0 && plus + 1 < policy.size())
    return policy.substr(0, plus);
  return "full";
}

std::string budget_label(const std::string& budget) { return budget.empty() ? "full" : budget; }

std::vector<std::string> ordered_tasks(const std::string& benchmark,
                                       const std::vector<std::string>& present) {
  const Benchmark* known = lookup_benchmark(benchmark);
  const std::vector<std::string> official = known ? known->table_tasks : std::vector<std::string>();
  const std::set<std::string> have(present.begin(), present.end());
  std::vector<std::string> ordered;
  for (const auto& t : official)
    if (have.count(t)) ordered.push_back(t);
  std::vector<std::string> rest;
  for (const auto& t : have)
    if (std::find(official.begin(), official.end(), t) == official.end()) rest.push_back(t);
  ordered.insert(ordered.end(), rest.begin(), rest.end());
  return ordered;
}

std::vector<TextTable> build_tables(const std::vector<StoredRow>& rows, const std::string& layout) {
  if (layout == "latency") return latency_or_memory_tables(rows, false);
  if (layout == "memory") return latency_or_memory_tables(rows, true);
  const bool by_length =
      layout.size() > kByLengthSuffix.size() && layout.ends_with(kByLengthSuffix);
  const Benchmark* benchmark = lookup_benchmark(
      by_length ? layout.substr(0, layout.size() - kByLengthSuffix.size()) : layout);
  if (benchmark && by_length && benchmark->layout == TableLayout::kPerTask)
    return length_summary_tables(rows, *benchmark);
  if (!benchmark || by_length) {
    const std::string known = join(table_layouts(), ", ");
    throw InputError("--layout '" + layout + "' is unknown (use one of " + known +
                     ", or paired with --against POLICY)");
  }
  switch (benchmark->layout) {
    case TableLayout::kPerTask:
      return per_task_tables(rows, benchmark->name, benchmark->title, true);
    case TableLayout::kLongBenchCategories:
      return category_tables(rows, *benchmark);
    case TableLayout::kDepthGrid:
      return depth_grid_tables(rows, *benchmark);
  }
  return {};
}

std::string render_tables(const std::vector<TextTable>& tables, const std::string& format) {
  std::ostringstream out;
  if (format != "md" && format != "csv" && format != "latex")
    throw InputError("--format '" + format + "' is unknown (use md, csv or latex)");
  for (size_t t = 0; t < tables.size(); ++t) {
    const TextTable& table = tables[t];
    if (t) out << "\n";
    if (format == "md") {
      out << "### " << escape_markdown(table.title) << "\n\n|";
      for (const auto& c : table.columns) out << " " << escape_markdown(c) << " |";
      out << "\n|";
      for (size_t i = 0; i < table.columns.size(); ++i) out << (i < 2 ? " --- |" : " ---: |");
      out << "\n";
      for (const auto& row : table.rows) {
        out << "|";
        for (const auto& cell : row) out << " " << escape_markdown(cell) << " |";
        out << "\n";
      }
    } else if (format == "csv") {
      out << "# " << table.title << "\n";
      for (size_t i = 0; i < table.columns.size(); ++i)
        out << (i ? "," : "") << escape_csv(table.columns[i]);
      out << "\n";
      for (const auto& row : table.rows) {
        for (size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << escape_csv(row[i]);
        out << "\n";
      }
    } else {
      out << "\\begin{table}[t]\n\\centering\n\\caption{" << escape_latex(table.title)
          << "}\n\\resizebox{\\linewidth}{!}{%\n\\begin{tabular}{ll"
          << std::string(table.columns.size() > 2 ? table.columns.size() - 2 : 0, 'r')
          << "}\n\\toprule\n";
      for (size_t i = 0; i < table.columns.size(); ++i)
        out << (i ? " & " : "") << escape_latex(table.columns[i]);
      out << " \\\\\n\\midrule\n";
      for (const auto& row : table.rows) {
        for (size_t i = 0; i < row.size(); ++i) out << (i ? " & " : "") << escape_latex(row[i]);
        out << " \\\\\n";
      }
      out << "\\bottomrule\n\\end{tabular}}\n\\end{table}\n";
    }
  }
  return out.str();
}

nlohmann::json tables_to_json(const std::vector<TextTable>& tables) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : tables)
    out.push_back({{"title", t.title}, {"columns", t.columns}, {"rows", t.rows}});
  return out;
}

}  // namespace kvb
