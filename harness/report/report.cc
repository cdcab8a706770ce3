#include "harness/report/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/errors.h"
#include "datasets/registry.h"
#include "engine/cache_policy.h"
#include "harness/report/paired.h"
#include "harness/report/svg.h"
#include "harness/report/tables.h"

namespace kvb {
namespace {

using svg::escape_xml;

double mean_of(const std::vector<double>& values) {
  if (values.empty()) return NAN;
  double sum = 0;
  for (const double v : values) sum += v;
  return sum / values.size();
}

std::string html_table(const TextTable& table) {
  std::ostringstream out;
  out << "<table><caption>" << escape_xml(table.title) << "</caption><tr>";
  for (const auto& c : table.columns) out << "<th>" << escape_xml(c) << "</th>";
  out << "</tr>\n";
  for (const auto& row : table.rows) {
    out << "<tr>";
    for (const auto& cell : row) out << "<td>" << escape_xml(cell) << "</td>";
    out << "</tr>\n";
  }
  out << "</table>\n";
  return out.str();
}

std::string slug(std::string text) {
  for (char& c : text)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  return text;
}

std::string series_name(const Cell& cell) { return cell.policy_label(); }

// Whether a row belongs to a benchmark whose table is a depth x length grid (NIAH).
bool has_depth_grid(const Cell& cell) {
  const Benchmark* benchmark = lookup_benchmark(cell.benchmark);
  return benchmark && benchmark->layout == TableLayout::kDepthGrid;
}

// NIAH heatmaps: one per (model, prompt mode, policy, budget).
std::vector<std::string> niah_heatmaps(const std::vector<StoredRow>& rows) {
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  std::vector<Key> order;
  std::map<Key, std::map<std::pair<double, int>, std::vector<double>>> cells;
  for (const auto& row : rows) {
    if (!has_depth_grid(row.cell)) continue;
    const Key key{row.cell.model, to_string(row.cell.prompt_mode), row.cell.policy_label(),
                  row.cell.budget_text()};
    if (!cells.count(key)) order.push_back(key);
    cells[key][{row.result.depth, row.cell.length}].push_back(row.result.score);
  }
  std::vector<std::string> plots;
  for (const auto& key : order) {
    const auto& [model, mode, policy, budget] = key;
    std::set<double> depths;
    std::set<int> lengths;
    std::vector<double> all;
    for (const auto& [dl, scores] : cells[key]) {
      depths.insert(dl.first);
      lengths.insert(dl.second);
      all.insert(all.end(), scores.begin(), scores.end());
    }
    svg::Heatmap map;
    map.id = "niah-" + slug(model + "-" + mode + "-" + policy + "-" + budget);
    map.kind = "niah-heatmap";
    std::ostringstream mean;
    mean.precision(1);
    mean << std::fixed << 100 * mean_of(all);
    map.title = policy + " @ " + budget_label(budget) + " (" + mode + ", mean " + mean.str() + ")";
    map.x_label = "context length (tokens)";
    map.y_label = "needle depth (%)";
    for (const int l : lengths) map.x_ticks.push_back(std::to_string(l));
    for (const double d : depths) {
      std::ostringstream tick;
      tick << d;
      map.y_ticks.push_back(tick.str());
      std::vector<double> line;
      for (const int l : lengths) {
        const auto it = cells[key].find({d, l});
        line.push_back(it == cells[key].end() ? NAN : mean_of(it->second));
      }
      map.values.push_back(line);
    }
    plots.push_back(svg::render(map));
  }
  return plots;
}

// Line charts whose x axis is the budget: accuracy (per benchmark) or TPOT.
std::vector<std::string> by_budget_charts(const std::vector<StoredRow>& rows, bool tpot) {
  using Key = std::tuple<std::string, std::string, std::string>;  // model, mode, benchmark
  std::vector<Key> order;
  std::map<Key, std::vector<std::string>> series_order;
  std::map<Key, std::set<std::string>> budgets;
  std::map<Key, std::map<std::string, std::map<std::string, std::vector<double>>>> values;
  for (const auto& row : rows) {
    if (tpot && row.result.tokens_out < 2) continue;
    const Key key{row.cell.model, to_string(row.cell.prompt_mode),
                  tpot ? std::string("all benchmarks") : row.cell.benchmark};
    if (!values.count(key)) order.push_back(key);
    const std::string name = series_name(row.cell);
    auto& by_series = values[key];
    if (!by_series.count(name)) series_order[key].push_back(name);
    if (row.cell.budget) budgets[key].insert(row.cell.budget_text());
    by_series[name][row.cell.budget_text()].push_back(tpot ? row.result.tpot_ms
                                                           : 100 * row.result.score);
  }
  std::vector<std::string> plots;
  for (const auto& key : order) {
    const auto& [model, mode, benchmark] = key;
    svg::LineChart chart;
    chart.kind = tpot ? "tpot-vs-budget" : "accuracy-vs-budget";
    chart.id = chart.kind + "-" + slug(model + "-" + mode + "-" + benchmark);
    chart.title = (tpot ? "TPOT vs budget, " : "Accuracy vs budget, " + benchmark + ", ") + mode;
    chart.x_label = "KV budget";
    chart.y_label = tpot ? "TPOT (ms)" : "score";
    chart.x_ticks = ordered_budgets({budgets[key].begin(), budgets[key].end()});
    if (chart.x_ticks.empty()) chart.x_ticks = {"full"};
    if (!tpot) chart.y_min = 0, chart.y_max = 100;
    for (const auto& name : series_order[key]) {
      const auto& by_budget = values[key][name];
      svg::Series series;
      series.name = name;
      if (by_budget.count("")) {  // budget-less: a flat reference line across the axis
        series.dashed = true;
        series.values.assign(chart.x_ticks.size(), mean_of(by_budget.at("")));
      } else {
        for (const auto& b : chart.x_ticks) {
          const auto it = by_budget.find(b);
          series.values.push_back(it == by_budget.end() ? NAN : mean_of(it->second));
        }
      }
      chart.series.push_back(std::move(series));
    }
    plots.push_back(svg::render(chart));
  }
  return plots;
}

// Accuracy vs context length: per (model, mode, benchmark), one line per policy x budget.
std::vector<std::string> by_length_charts(const std::vector<StoredRow>& rows) {
  using Key = std::tuple<std::string, std::string, std::string>;
  std::vector<Key> order;
  std::map<Key, std::vector<std::string>> series_order;
  std::map<Key, std::set<int>> lengths;
  std::map<Key, std::map<std::string, std::map<int, std::vector<double>>>> values;
  for (const auto& row : rows) {
    const Key key{row.cell.model, to_string(row.cell.prompt_mode), row.cell.benchmark};
    if (!values.count(key)) order.push_back(key);
    const std::string name = series_name(row.cell) + " @ " + budget_label(row.cell.budget_text());
    if (!values[key].count(name)) series_order[key].push_back(name);
    lengths[key].insert(row.cell.length);
    values[key][name][row.cell.length].push_back(100 * row.result.score);
  }
  std::vector<std::string> plots;
  for (const auto& key : order) {
    const auto& [model, mode, benchmark] = key;
    svg::LineChart chart;
    chart.kind = "accuracy-vs-length";
    chart.id = chart.kind + "-" + slug(model + "-" + mode + "-" + benchmark);
    chart.title = "Accuracy vs context length, " + benchmark + ", " + mode;
    chart.x_label = "context length (tokens)";
    chart.y_label = "score";
    chart.y_min = 0;
    chart.y_max = 100;
    for (const int l : lengths[key]) chart.x_ticks.push_back(std::to_string(l));
    for (const auto& name : series_order[key]) {
      svg::Series series;
      series.name = name;
      series.dashed = name.rfind("full", 0) == 0;
      for (const int l : lengths[key]) {
        const auto it = values[key][name].find(l);
        series.values.push_back(it == values[key][name].end() ? NAN : mean_of(it->second));
      }
      chart.series.push_back(std::move(series));
    }
    plots.push_back(svg::render(chart));
  }
  return plots;
}

constexpr const char* kStyle = R"css(
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.plots{display:flex;flex-wrap:wrap;gap:16px}
svg.plot{background:#fff;border:1px solid #e3e3e3}
svg .t{font-size:13px;font-weight:600}svg .tick{font-size:11px;fill:#444}
svg .label{font-size:12px;fill:#222}svg .legend{font-size:11px}
svg .grid{stroke:#eee}svg .axis{stroke:#888}
table{border-collapse:collapse;margin:12px 0;font-size:12px}
caption{text-align:left;font-weight:600;padding:4px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
td:first-child,th:first-child{text-align:left}
.meta td{text-align:left}
)css";

}  // namespace

std::vector<std::string> ordered_budgets(std::vector<std::string> budgets) {
  auto key = [](const std::string& b) {
    try {
      const Budget parsed = Budget::parse(b);
      return std::make_pair(parsed.unit == Budget::Unit::kFraction ? 0 : 1, parsed.value);
    } catch (const InputError&) {
      return std::make_pair(2, 0.0);
    }
  };
  std::stable_sort(budgets.begin(), budgets.end(),
                   [&](const std::string& a, const std::string& b) { return key(a) < key(b); });
  return budgets;
}

std::string render_report_html(const std::vector<StoredRow>& rows,
                               const std::vector<RunRecord>& runs, const std::string& title) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
      << escape_xml(title) << "</title>\n<style>" << kStyle << "</style></head>\n<body>\n";
  out << "<h1>" << escape_xml(title) << "</h1>\n<p>" << rows.size() << " results from "
      << runs.size() << " run(s). Scores are in points (0-100); the NIAH colour scale runs from "
      << "red (0) through yellow to green (100).</p>\n";

  out << "<h2>Runs</h2>\n<table class=\"meta\"><tr><th>run</th><th>started</th><th>status</th>"
         "<th>config</th><th>shard</th><th>git commit</th><th>host</th><th>CPU</th><th>GPU</th>"
         "<th>prefill reuse</th><th>models</th></tr>\n";
  for (const auto& run : runs) {
    std::string models;
    for (const auto& m : run.info.models)
      models += m.value("name", "") + " sha256:" + m.value("sha256", "").substr(0, 12) + " ";
    out << "<tr><td>" << run.run_id << "</td><td>" << escape_xml(run.info.started_at) << "</td><td>"
        << escape_xml(run.info.status) << "</td><td>" << escape_xml(run.info.config_name)
        << "</td><td>" << escape_xml(run.info.shard) << "</td><td>"
        << escape_xml(run.info.git_commit.substr(0, 12)) << "</td><td>" << escape_xml(run.info.host)
        << "</td><td>" << escape_xml(run.info.cpu) << "</td><td>" << escape_xml(run.info.gpu)
        << "</td><td>" << (run.info.prefill_reuse ? "yes" : "no") << "</td><td>"
        << escape_xml(models) << "</td></tr>\n";
  }
  out << "</table>\n";

  auto section = [&](const std::string& heading, const std::string& id,
                     const std::vector<std::string>& plots) {
    out << "<h2 id=\"" << id << "\">" << escape_xml(heading) << "</h2>\n";
    if (plots.empty()) {
      out << "<p class=\"empty\">No data for this plot in the database.</p>\n";
      return;
    }
    out << "<div class=\"plots\">\n";
    for (const auto& p : plots) out << p;
    out << "</div>\n";
  };
  section("NIAH heatmaps", "niah", niah_heatmaps(rows));
  section("Accuracy vs budget", "accuracy-budget", by_budget_charts(rows, false));
  section("Accuracy vs context length", "accuracy-length", by_length_charts(rows));
  section("TPOT vs budget", "tpot-budget", by_budget_charts(rows, true));

  out << "<h2 id=\"tables\">Tables</h2>\n";
  for (const auto& layout : table_layouts())
    for (const auto& table : build_tables(rows, layout)) out << html_table(table);
  // Each method's loss against Full on the same samples (harness/report/paired.h), where the
  // database has Full rows.
  const bool has_full = std::any_of(rows.begin(), rows.end(), [](const StoredRow& row) {
    return row.cell.policy_label() == "full";
  });
  const std::vector<TextTable> paired =
      has_full ? build_paired_tables(rows, "full") : std::vector<TextTable>{};
  if (!paired.empty()) {
    out << "<h2 id=\"paired\">Against Full on the same samples</h2>\n";
    for (const auto& table : paired) out << html_table(table);
  }
  out << "</body></html>\n";
  return out.str();
}

std::filesystem::path write_report(const std::vector<StoredRow>& rows,
                                   const std::vector<RunRecord>& runs, const std::string& title,
                                   const std::filesystem::path& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir))
    throw InputError("cannot create report folder " + out_dir.string() + " (" +
                     (ec ? ec.message() : std::string("a file is in the way")) +
                     "); choose a writable --out");
  const std::string html = render_report_html(rows, runs, title);
  const fs::path target = out_dir / "index.html";
  const fs::path partial = out_dir / ".index.html.partial";
  {
    std::ofstream file(partial, std::ios::binary | std::ios::trunc);
    if (!file)
      throw InputError("cannot write in report folder " + out_dir.string() +
                       " (permission denied or read-only); choose a writable --out");
    file << html;
    file.flush();
    if (!file) {
      fs::remove(partial, ec);
      throw InputError("writing " + partial.string() + " failed (disk full?)");
    }
  }
  fs::rename(partial, target, ec);
  if (ec) {
    fs::remove(partial, ec);
    throw InputError("cannot replace " + target.string() + ": " + ec.message());
  }
  return target;
}

}  // namespace kvb
