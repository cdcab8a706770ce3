#include "harness/sweep/runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/errors.h"
#include "tests/harness/fake_backend.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return test::fresh_temp_dir("kvb_runner_" + name); }

// 2 RULER tasks x 2 lengths x 3 samples + a NIAH grid of 2 lengths x 3 depths; 5 policies,
// 2 budgets: full + 4 policies x 2 budgets = 9 cells per group (cake runs on its own).
SweepConfig test_config(const std::string& prompt_mode = "query-aware") {
  return parse_sweep_config(nlohmann::json::parse(R"({
    "models": ["m.gguf"],
    "benchmarks": [
      {"benchmark": "ruler", "tasks": ["niah_single_1", "niah_multikey_1"], "lengths": [1024, 2048],
       "samples": 3},
      {"benchmark": "niah", "lengths": [1024, 2048], "depths": [0, 50, 100]}],
    "policies": ["full", "streamingllm", "snapkv", "dropkv", "cake"],
    "budgets": ["25%", "10%"],
    "prompt_mode": ")" + prompt_mode + R"("})"),
                            "test.json");
}

// Everything a row says about the experiment, without times and run ids.
std::set<std::string> row_identities(const fs::path& db) {
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  std::set<std::string> out;
  for (const auto& row : store.load_rows()) {
    const auto& r = row.result;
    out.insert(row.cell.key() + "|" + std::to_string(row.sample_index) + "|" + r.sample_id + "|" +
               r.prediction + "|" + std::to_string(r.score) + "|" + std::to_string(r.depth) + "|" +
               std::to_string(r.kv_bytes));
  }
  return out;
}

RunOptions quiet() {
  RunOptions options;
  options.progress = nullptr;
  return options;
}

TEST(Runner, PrefillsOncePerSampleAndPromptModeAndReplaysTheRest) {
  const fs::path db = fresh_dir("reuse") / "r.db";
  const SweepConfig config = test_config("both");
  const SweepPlan plan = plan_sweep(config, Shard{});
  ResultStore store(db, ResultStore::Mode::kReadWrite);
  test::FakeBackend backend;
  const RunSummary summary = run_sweep(plan, backend, store, RunInfo{}, quiet());
  const int samples = 2 * 2 * 3 + 2 * 3;  // 18 work units
  const int cells_per_mode = 1 + 4 * 2;   // 9
  EXPECT_EQ(summary.rows_written, samples * cells_per_mode * 2);
  EXPECT_EQ(store.result_count(), summary.rows_written);
  // One shared prefill per (sample, mode), plus one per cake cell (2 budgets) that runs alone.
  EXPECT_EQ(backend.prefills, samples * 2 * (1 + 2));
  EXPECT_EQ(summary.prefills, backend.prefills);
  EXPECT_EQ(backend.groups_begun, 6);
  int reused = 0;
  for (const auto& row : store.load_rows()) reused += row.result.prefill_reused;
  EXPECT_EQ(reused, samples * 2 * 7);

  // Without reuse, every cell prefills for itself.
  const fs::path db2 = fresh_dir("noreuse") / "r.db";
  ResultStore store2(db2, ResultStore::Mode::kReadWrite);
  test::FakeBackend backend2;
  RunOptions options = quiet();
  options.prefill_reuse = false;
  run_sweep(plan, backend2, store2, RunInfo{}, options);
  EXPECT_EQ(backend2.prefills, samples * cells_per_mode * 2);
  EXPECT_EQ(row_identities(db), row_identities(db2));
}

TEST(Runner, RepeatedRunNeedsResumeAndResumeSkipsFinishedRows) {
  const fs::path db = fresh_dir("resume") / "r.db";
  const SweepPlan plan = plan_sweep(test_config(), Shard{});
  ResultStore store(db, ResultStore::Mode::kReadWrite);
  test::FakeBackend first;
  std::atomic<bool> stop{false};
  // Ctrl-C during the 20th row: the cells decoded together with it are stored, nothing after.
  struct StopAfter : test::FakeBackend {
    std::atomic<bool>* stop;
    SampleResult run_cell(const SampleGroup& g, const Cell& c, int s) override {
      if (rows_run + 1 >= 20) stop->store(true);
      return FakeBackend::run_cell(g, c, s);
    }
  } stopping;
  stopping.stop = &stop;
  RunOptions options = quiet();
  options.stop = &stop;
  const RunSummary partial = run_sweep(plan, stopping, store, RunInfo{}, options);
  EXPECT_TRUE(partial.interrupted);
  const int64_t written = partial.rows_written;
  EXPECT_EQ(written, stopping.rows_run);
  EXPECT_GE(written, 20);
  EXPECT_LT(written, plan.total_rows());
  EXPECT_EQ(store.load_runs().back().info.status, "interrupted");

  EXPECT_THROW(run_sweep(plan, first, store, RunInfo{}, quiet()), InputError);
  EXPECT_EQ(store.result_count(), written);

  RunOptions resume = quiet();
  resume.resume = true;
  const RunSummary rest = run_sweep(plan, first, store, RunInfo{}, resume);
  EXPECT_EQ(rest.rows_skipped, written);
  EXPECT_EQ(rest.rows_written, plan.total_rows() - written);
  EXPECT_EQ(first.rows_run, plan.total_rows() - written);
  EXPECT_EQ(store.result_count(), plan.total_rows());
}

TEST(Runner, SigkillMidSweepThenResumeGivesExactlyTheUninterruptedRows) {
  const fs::path dir = fresh_dir("kill");
  const SweepPlan plan = plan_sweep(test_config(), Shard{});
  {
    ResultStore reference(dir / "reference.db", ResultStore::Mode::kReadWrite);
    test::FakeBackend backend;
    run_sweep(plan, backend, reference, RunInfo{}, quiet());
  }
  const fs::path db = dir / "killed.db";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child runs the sweep slowly until it is killed; it must never reach the end.
    try {
      ResultStore store(db, ResultStore::Mode::kReadWrite);
      test::FakeBackend backend;
      backend.sleep_ms = 15;
      run_sweep(plan, backend, store, RunInfo{}, quiet());
    } catch (...) {
    }
    _exit(0);
  }
  // Kill it once some rows are durable.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int64_t stored = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!fs::exists(db)) continue;
    try {
      ResultStore peek(db, ResultStore::Mode::kReadOnly);
      stored = peek.result_count();
    } catch (const std::exception&) {
      continue;  // schema not created yet
    }
    if (stored >= 25) break;
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the sweep finished before it could be killed";
  {
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    const int64_t survived = store.result_count();
    EXPECT_GE(survived, 25);
    EXPECT_LT(survived, plan.total_rows());
    test::FakeBackend backend;
    RunOptions resume = quiet();
    resume.resume = true;
    const RunSummary summary = run_sweep(plan, backend, store, RunInfo{}, resume);
    EXPECT_EQ(summary.rows_skipped, survived);
    EXPECT_EQ(store.result_count(), plan.total_rows());
    const auto runs = store.load_runs();
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].info.status, "running");  // the killed run never closed
    EXPECT_EQ(runs[1].info.status, "finished");
  }
  EXPECT_EQ(row_identities(db), row_identities(dir / "reference.db"));
}

TEST(Runner, TwoShardsMergedEqualOneUnshardedRun) {
  const fs::path dir = fresh_dir("shards");
  const SweepConfig config = test_config();
  {
    ResultStore whole(dir / "whole.db", ResultStore::Mode::kReadWrite);
    test::FakeBackend backend;
    run_sweep(plan_sweep(config, Shard{}), backend, whole, RunInfo{}, quiet());
  }
  int64_t shard_rows = 0;
  for (int i = 0; i < 2; ++i) {
    ResultStore shard(dir / ("shard" + std::to_string(i) + ".db"), ResultStore::Mode::kReadWrite);
    test::FakeBackend backend;
    RunInfo info;
    info.shard = Shard{i, 2}.to_string();
    const auto summary = run_sweep(plan_sweep(config, Shard{i, 2}), backend, shard, info, quiet());
    EXPECT_GT(summary.rows_written, 0);
    shard_rows += summary.rows_written;
  }
  {
    ResultStore merged(dir / "merged.db", ResultStore::Mode::kReadWrite);
    for (int i = 0; i < 2; ++i) {
      ResultStore shard(dir / ("shard" + std::to_string(i) + ".db"), ResultStore::Mode::kReadOnly);
      const auto stats = merged.merge_from(shard);
      EXPECT_EQ(stats.rows_skipped, 0);
    }
    EXPECT_EQ(merged.result_count(), shard_rows);
    EXPECT_EQ(merged.load_runs().size(), 2u);
  }
  EXPECT_EQ(row_identities(dir / "merged.db"), row_identities(dir / "whole.db"));
}

TEST(Runner, ProgressLines) {
  EXPECT_EQ(ProgressReporter::format_duration(5), "5s");
  EXPECT_EQ(ProgressReporter::format_duration(65), "1m05s");
  EXPECT_EQ(ProgressReporter::format_duration(3700), "1h01m");
  char* buffer = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buffer, &size);
  {
    ProgressReporter plain(out, false, 4, 0.0);
    for (int i = 0; i < 4; ++i) plain.advance("row");
    plain.finish();
  }
  std::fclose(out);
  const std::string text(buffer, size);
  free(buffer);
  EXPECT_NE(text.find("4/4 rows (100%)"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

}  // namespace
}  // namespace kvb
