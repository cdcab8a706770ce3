// build_paired_tables (harness/report/paired.h): differences paired by (task, sample index),
// against hand-computed means and Student intervals.
#include "harness/report/paired.h"

#include <gtest/gtest.h>

#include "common/errors.h"

namespace kvb {
namespace {

StoredRow row(const std::string& task, int length, const std::string& policy,
              const std::string& budget, int sample, double score,
              PromptMode mode = PromptMode::kQueryAware) {
  StoredRow r;
  r.cell.model = "m";
  r.cell.benchmark = "ruler";
  r.cell.task = task;
  r.cell.length = length;
  r.cell.policy = policy;
  r.cell.budget = budget_from_text(budget);
  r.cell.prompt_mode = mode;
  r.sample_index = sample;
  r.result.score = score;
  return r;
}

// Six pairs over two tasks whose sample indices repeat: differences {1, 1, 1, 0, 1, 1}: mean 5/6,
// sd sqrt(1/6), t(5) 2.571 -> 0.8333 -+ 0.4285, clipped to 1 above. Sample 9 of task b has no
// reference row and is left out.
std::vector<StoredRow> two_task_rows() {
  std::vector<StoredRow> rows;
  const double dropkv[2][3] = {{1, 1, 1}, {1, 1, 1}};
  const double snapkv[2][3] = {{0, 0, 0}, {1, 0, 0}};
  for (int t = 0; t < 2; ++t)
    for (int s = 0; s < 3; ++s) {
      const char* task = t == 0 ? "a" : "b";
      rows.push_back(row(task, 4096, "snapkv", "5%", s, snapkv[t][s]));
      rows.push_back(row(task, 4096, "dropkv", "5%", s, dropkv[t][s]));
    }
  rows.push_back(row("b", 4096, "dropkv", "5%", 9, 0.0));
  return rows;
}

TEST(PairedTables, MeanAndStudentIntervalOfThePairedDifferences) {
  const auto tables = build_paired_tables(two_task_rows(), "snapkv");
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].columns, (std::vector<std::string>{"Policy", "Budget", "4096"}));
  ASSERT_EQ(tables[0].rows.size(), 1u);
  EXPECT_EQ(tables[0].rows[0],
            (std::vector<std::string>{"dropkv", "5%", "+83.3* (+40.5 to +100.0) n=6"}));
  // The other way round: the same interval mirrored.
  const auto back = build_paired_tables(two_task_rows(), "dropkv");
  EXPECT_EQ(back[0].rows[0][2], "-83.3* (-100.0 to -40.5) n=6");
}

TEST(PairedTables, ReferenceAtTheRowsBudgetElseItsBudgetlessRows) {
  std::vector<StoredRow> rows;
  for (int s = 0; s < 4; ++s) {
    rows.push_back(row("a", 1024, "full", "", s, 1.0));
    rows.push_back(row("a", 1024, "snapkv", "10%", s, s < 2 ? 1.0 : 0.0));
    rows.push_back(row("a", 2048, "snapkv", "10%", s, 1.0));  // no Full at 2048
  }
  const auto tables = build_paired_tables(rows, "full");
  ASSERT_EQ(tables.size(), 1u);
  ASSERT_EQ(tables[0].rows.size(), 1u);
  // Differences {0, 0, -1, -1}: mean -0.5, sd 0.57735, t(3) 3.182 -> -0.5 -+ 0.9186.
  EXPECT_EQ(tables[0].rows[0],
            (std::vector<std::string>{"snapkv", "10%", "-50.0 (-100.0 to +41.9) n=4", "-"}));
}

TEST(PairedTables, PromptModesApartAndTiesUnmarked) {
  std::vector<StoredRow> rows;
  for (int s = 0; s < 3; ++s)
    for (const PromptMode mode : {PromptMode::kQueryAware, PromptMode::kQuestionAgnostic}) {
      rows.push_back(row("a", 1024, "snapkv", "5%", s, 1.0, mode));
      rows.push_back(row("a", 1024, "knorm", "5%", s, 1.0, mode));
    }
  const auto tables = build_paired_tables(rows, "snapkv");
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_NE(tables[0].title.find("query-aware"), std::string::npos);
  EXPECT_NE(tables[1].title.find("question-agnostic"), std::string::npos);
  EXPECT_EQ(tables[1].rows[0][2], "0.0 (0.0 to 0.0) n=3");
}

TEST(PairedTables, UnknownReferenceNamesThePoliciesPresent) {
  try {
    build_paired_tables(two_task_rows(), "h2o");
    FAIL() << "accepted";
  } catch (const InputError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("'h2o'"), std::string::npos) << what;
    EXPECT_NE(what.find("dropkv, snapkv"), std::string::npos) << what;
  }
  EXPECT_TRUE(build_paired_tables({}, "anything").empty());
}

}  // namespace
}  // namespace kvb
