#include "harness/report/tables.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/errors.h"
#include "harness/report/compare.h"
#include "harness/report/stats.h"

namespace kvb {
namespace {

StoredRow row(const std::string& benchmark, const std::string& task, int length,
              const std::string& policy, const std::string& budget, double score,
              double tpot_ms = 10, double depth = -1, int64_t kv_bytes = 1000) {
  StoredRow r;
  r.cell.model = "m";
  r.cell.benchmark = benchmark;
  r.cell.task = task;
  r.cell.length = length;
  r.cell.policy = policy;
  r.cell.budget = budget_from_text(budget);
  r.result.score = score;
  r.result.tpot_ms = tpot_ms;
  r.result.ttft_ms = 100;
  r.result.tokens_out = 10;
  r.result.depth = depth;
  r.result.kv_bytes = kv_bytes;
  return r;
}

TEST(Stats, StudentWilsonAndClippedIntervals) {
  // Student t, range [0, 10]: 1,2,3,4 -> mean 2.5, sd 1.29099, t(3) 3.182 -> 2.5 -+ 2.054.
  const MeanCi s = mean_ci({1, 2, 3, 4}, 0, 10);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_TRUE(s.has_interval);
  EXPECT_FALSE(s.wilson);
  EXPECT_NEAR(s.low, 0.4460, 1e-3);
  EXPECT_NEAR(s.high, 4.5540, 1e-3);
  // The same interval in [0, 4] is clipped at 4.
  EXPECT_DOUBLE_EQ(mean_ci({1, 2, 3, 4}, 0, 4).high, 4.0);
  // 0/1 scores: Wilson's interval (standard tables: 2 of 4 -> 0.150-0.850; 0 of 3 -> 0-0.5615).
  const MeanCi half = mean_ci({1, 0, 1, 0});
  EXPECT_TRUE(half.wilson);
  EXPECT_NEAR(half.low, 0.1500, 1e-3);
  EXPECT_NEAR(half.high, 0.8500, 1e-3);
  const MeanCi none = mean_ci({0, 0, 0});
  EXPECT_NEAR(none.low, 0.0, 1e-9);
  EXPECT_NEAR(none.high, 0.5615, 1e-3);
  // Below 3 samples: the mean and no interval.
  const MeanCi two = mean_ci({1, 0});
  EXPECT_FALSE(two.has_interval);
  EXPECT_DOUBLE_EQ(two.low, 0.5);
  EXPECT_DOUBLE_EQ(two.high, 0.5);
  EXPECT_DOUBLE_EQ(student_t95(1000), 1.96);
}

TEST(Tables, RulerPerTaskWithAverageAndInterval) {
  std::vector<StoredRow> rows = {
      row("ruler", "vt", 1024, "snapkv", "25%", 1.0),
      row("ruler", "vt", 1024, "snapkv", "25%", 0.0),
      row("ruler", "niah_single_1", 1024, "snapkv", "25%", 1.0),
      row("ruler", "niah_single_1", 1024, "full", "", 1.0),
      row("ruler", "vt", 1024, "full", "", 1.0),
      row("ruler", "vt", 2048, "full", "", 0.5),
      row("niah", "niah", 1024, "full", "", 1.0, 10, 50),
  };
  const auto tables = build_tables(rows, "ruler");
  ASSERT_EQ(tables.size(), 2u);  // 1024 and 2048
  const TextTable& t = tables[0];
  // Official order puts niah_single_1 before vt.
  EXPECT_EQ(t.columns,
            (std::vector<std::string>{"Policy", "Budget", "niah_single_1", "vt", "Avg"}));
  ASSERT_EQ(t.rows.size(), 2u);
  // snapkv: niah 100 (n=1), vt mean 50 of 2 samples: n shown, no interval (t(1) would give
  // +-635 points, wider than the score range).
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"snapkv", "25%", "100.0", "50.0 (n=2)", "75.0"}));
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"full", "full", "100.0", "100.0", "100.0"}));
  EXPECT_EQ(tables[1].rows[0].back(), "50.0");
}

TEST(Tables, RulerByLengthAveragesTheTasksOfEachLength) {
  std::vector<StoredRow> rows = {
      row("ruler", "vt", 4096, "snapkv", "10%", 1.0),
      row("ruler", "vt", 4096, "snapkv", "10%", 0.0),
      row("ruler", "niah_single_1", 4096, "snapkv", "10%", 1.0),
      row("ruler", "vt", 8192, "snapkv", "10%", 0.25),
      row("ruler", "niah_single_1", 8192, "snapkv", "10%", 0.75),
      row("ruler", "vt", 4096, "full", "", 1.0),
      row("ruler", "niah_single_1", 4096, "full", "", 0.5),
  };
  const auto tables = build_tables(rows, "ruler-lengths");
  ASSERT_EQ(tables.size(), 1u);
  const TextTable& t = tables[0];
  EXPECT_EQ(t.columns, (std::vector<std::string>{"Policy", "Budget", "4096", "8192", "Avg"}));
  // snapkv: 4K (vt 50 + niah 100) / 2 = 75, 8K (25 + 75) / 2 = 50, over the lengths 62.5.
  // full ran at 4K only: no average over the lengths.
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"snapkv", "10%", "75.0", "50.0", "62.5"}));
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"full", "full", "75.0", "-", "-"}));
  // Each length's figure is the per-length table's Avg column.
  const auto per_length = build_tables(rows, "ruler");
  ASSERT_EQ(per_length.size(), 2u);
  EXPECT_EQ(per_length[0].rows[0].back(), "75.0");
  EXPECT_EQ(per_length[1].rows[0].back(), "50.0");
  // Only per-task benchmarks have the form.
  EXPECT_THROW(build_tables(rows, "longbench-lengths"), InputError);
  EXPECT_THROW(build_tables(rows, "-lengths"), InputError);
  const auto& layouts = table_layouts();
  EXPECT_NE(std::find(layouts.begin(), layouts.end(), "ruler-lengths"), layouts.end());
  EXPECT_EQ(std::find(layouts.begin(), layouts.end(), "niah-lengths"), layouts.end());
}

TEST(Tables, LatencyBaseOfAStackedPolicyIsItsBase) {
  EXPECT_EQ(latency_base_policy("snapkv+art"), "snapkv");
  EXPECT_EQ(latency_base_policy("quest+art"), "quest");  // any base, not a list of names
  EXPECT_EQ(latency_base_policy("full+art"), "full");
  EXPECT_EQ(latency_base_policy("snapkv"), "full");
  EXPECT_EQ(latency_base_policy("full"), "full");
  EXPECT_EQ(latency_base_policy("+art"), "full");  // no base before the '+'
}

TEST(Tables, LongBenchCategoryAverages) {
  std::vector<StoredRow> rows = {
      row("longbench", "qasper", 0, "full", "", 0.4),
      row("longbench", "narrativeqa", 0, "full", "", 0.2),
      row("longbench", "hotpotqa", 0, "full", "", 0.6),
      row("longbench", "lcc", 0, "full", "", 0.9),
  };
  const auto tables = build_tables(rows, "longbench");
  ASSERT_EQ(tables.size(), 1u);
  const auto& t = tables[0];
  EXPECT_EQ(t.columns, (std::vector<std::string>{"Policy", "Budget", "narrativeqa", "qasper",
                                                 "hotpotqa", "lcc", "SD-QA avg", "MD-QA avg",
                                                 "Code avg", "Avg", "Avg of categories"}));
  // datasets mean (20+40+60+90)/4 = 52.5; categories (30+60+90)/3 = 60
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"full", "full", "20.0", "40.0", "60.0", "90.0",
                                                 "30.0", "60.0", "90.0", "52.5", "60.0"}));
}

TEST(Tables, NiahGridLatencyAndMemory) {
  std::vector<StoredRow> rows = {
      row("niah", "niah", 1024, "full", "", 1.0, 20, 0, 4000),
      row("niah", "niah", 2048, "full", "", 0.0, 20, 0, 4000),
      row("niah", "niah", 1024, "full", "", 0.5, 20, 100, 4000),
      row("niah", "niah", 1024, "snapkv", "10%", 1.0, 8, 0, 400),
      row("niah", "niah", 1024, "snapkv+art", "10%", 1.0, 4, 0, 400),
  };
  const auto grid = build_tables(rows, "niah");
  ASSERT_EQ(grid.size(), 3u);
  EXPECT_EQ(grid[0].columns, (std::vector<std::string>{"Depth %", "1024", "2048"}));
  EXPECT_EQ(grid[0].rows[0], (std::vector<std::string>{"0", "100.0", "0.0"}));
  EXPECT_EQ(grid[0].rows[1], (std::vector<std::string>{"100", "50.0", "-"}));

  const auto latency = build_tables(rows, "latency");
  ASSERT_EQ(latency.size(), 1u);
  const auto& l = latency[0];
  // Rows: full 1024, full 2048, snapkv 10% 1024, snapkv+art 10% 1024.
  ASSERT_EQ(l.rows.size(), 4u);
  EXPECT_EQ(l.rows[2][9], "full");
  EXPECT_EQ(l.rows[2][11], "2.50x");  // 20 / 8
  EXPECT_EQ(l.rows[3][9], "snapkv 10%");
  EXPECT_EQ(l.rows[3][11], "2.00x");  // 8 / 4
  EXPECT_EQ(l.rows[0][11], "1.00x");

  const auto memory = build_tables(rows, "memory");
  EXPECT_EQ(memory[0].rows[2][6], "10.0%");
}

// A cell's peak is what it held alone (decode_batch 1): a batched row's peak is its whole batch's.
// Without rows measured alone the batched rows stand in, as for the timings.
TEST(Tables, PeakMemoryComesFromRowsMeasuredAlone) {
  constexpr int64_t kMiB = 1 << 20;
  auto with_peak = [](StoredRow r, int64_t peak, int decode_batch) {
    r.result.peak_bytes = peak;
    r.result.extra["decode_batch"] = decode_batch;
    return r;
  };
  std::vector<StoredRow> rows = {
      with_peak(row("ruler", "vt", 1024, "snapkv", "10%", 1.0), 100 * kMiB, 1),
      with_peak(row("ruler", "vt", 1024, "snapkv", "10%", 1.0), 900 * kMiB, 10),
      with_peak(row("ruler", "vt", 1024, "full", "", 1.0), 700 * kMiB, 10),
  };
  const auto memory = build_tables(rows, "memory");
  ASSERT_EQ(memory.size(), 1u);
  ASSERT_EQ(memory[0].rows.size(), 2u);
  EXPECT_EQ(memory[0].rows[0][7], "100.0");  // snapkv: its row alone
  EXPECT_EQ(memory[0].rows[1][7], "700.0");  // full: only batched rows
}

TEST(Tables, FormatsAndErrors) {
  // 1, 0.5, 0: mean 50, t(2) 4.303 * 0.5 / sqrt(3) = 124 points, clipped to the score range.
  std::vector<StoredRow> rows = {row("ruler", "vt", 1024, "snapkv", "25%", 1.0),
                                 row("ruler", "vt", 1024, "snapkv", "25%", 0.5),
                                 row("ruler", "vt", 1024, "snapkv", "25%", 0.0)};
  const auto tables = build_tables(rows, "ruler");
  const std::string md = render_tables(tables, "md");
  EXPECT_NE(md.find("| snapkv | 25% | 50.0 (0.0–100.0) |"), std::string::npos) << md;
  const std::string csv = render_tables(tables, "csv");
  EXPECT_NE(csv.find("Policy,Budget,vt,Avg\nsnapkv,25%,50.0 (0.0–100.0)"), std::string::npos)
      << csv;
  const std::string latex = render_tables(tables, "latex");
  EXPECT_NE(latex.find("snapkv & 25\\% & 50.0 (0.0--100.0)"), std::string::npos) << latex;
  EXPECT_NE(latex.find("\\begin{tabular}{llrr}"), std::string::npos);
  EXPECT_THROW(build_tables(rows, "rulers"), InputError);
  EXPECT_THROW(render_tables(tables, "html"), InputError);
  EXPECT_TRUE(build_tables(rows, "longbench").empty());
}

TEST(Compare, AccuracyDropAndLatencyRatio) {
  std::vector<StoredRow> base = {
      row("ruler", "vt", 1024, "full", "", 1.0, 20),
      row("ruler", "vt", 1024, "snapkv", "25%", 1.0, 10),
      row("ruler", "vt", 1024, "snapkv", "25%", 0.5, 10),
  };
  const auto baseline = summarize_results(base);
  ASSERT_EQ(baseline["accuracy"].size(), 2u);
  ASSERT_EQ(baseline["latency"].size(), 1u);
  EXPECT_DOUBLE_EQ(baseline["latency"][0]["tpot_ratio_vs_full"].get<double>(), 0.5);

  CompareOptions options;  // 5 points, 1.5x
  EXPECT_EQ(compare_summaries(baseline, baseline, options).regressions, 0);

  auto worse = base;
  worse[2].result.score = 0.3;  // snapkv 75 -> 65: a 10-point drop
  auto result = compare_summaries(baseline, summarize_results(worse), options);
  EXPECT_EQ(result.regressions, 1);
  options.max_accuracy_drop = 10;
  EXPECT_EQ(compare_summaries(baseline, summarize_results(worse), options).regressions, 0);

  auto slower = base;
  slower[1].result.tpot_ms = slower[2].result.tpot_ms = 16;  // ratio 0.5 -> 0.8 (x1.6)
  options = CompareOptions{};
  EXPECT_EQ(compare_summaries(baseline, summarize_results(slower), options).regressions, 1);
  // The same slowdown on Full too keeps the ratio: not a regression (machines differ).
  for (auto& r : slower) r.result.tpot_ms *= 3;
  slower[0].result.tpot_ms = 20 * 3 * 1.6;
  EXPECT_EQ(compare_summaries(baseline, summarize_results(slower), options).regressions, 0);

  auto missing = base;
  missing.pop_back();
  missing.pop_back();
  EXPECT_EQ(compare_summaries(baseline, summarize_results(missing), options).regressions, 2);
  EXPECT_THROW(compare_summaries(nlohmann::json::object(), baseline, options), FormatError);
}

}  // namespace
}  // namespace kvb
