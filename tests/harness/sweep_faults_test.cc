// Faults injected into sweeps (issue 18): a sweep process killed at many points, then resumed, ends
// with exactly the rows of an uninterrupted run; a full disk or a file-size limit is a clear error
// that leaves every stored row intact. The sweep runs the real runner and store
// (harness/sweep/runner.cc, harness/sweep/store.cc) in a forked child with the fake backend
// (tests/harness/fake_backend.h), whose rows depend only on (cell, sample): the uninterrupted
// reference is the independent truth. The kvbench binary's faults are in run_faults_test.cc.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "common/errors.h"
#include "harness/sweep/runner.h"
#include "harness/sweep/store.h"
#include "tests/harness/fake_backend.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return test::fresh_temp_dir("kvb_faults_" + name); }

// 1 RULER task x 3 samples and a NIAH grid of 2 depths; full, snapkv and cake (which prefills on
// its own) at 2 budgets: 5 cells x 5 units = 25 rows, in batches of 3 and single cells.
SweepPlan small_plan() {
  return plan_sweep(parse_sweep_config(nlohmann::json::parse(R"({
    "models": ["m.gguf"],
    "benchmarks": [{"benchmark": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 3},
                   {"benchmark": "niah", "lengths": [1024], "depths": [0, 100]}],
    "policies": ["full", "snapkv", "cake"],
    "budgets": ["25%", "10%"]})"),
                                       "faults.json"),
                    Shard{});
}

// Everything a row says about the experiment, without times and run ids, with its multiplicity:
// a duplicated row would count twice.
std::map<std::string, int> rows_of(const fs::path& db) {
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  std::map<std::string, int> out;
  for (const auto& row : store.load_rows()) {
    const auto& r = row.result;
    ++out[row.cell.key() + "|" + std::to_string(row.sample_index) + "|" + r.sample_id + "|" +
          r.prediction + "|" + nlohmann::json(r.references).dump() + "|" + std::to_string(r.score) +
          "|" + std::to_string(r.depth) + "|" + std::to_string(r.kv_bytes) + "|" +
          std::to_string(r.tokens_in)];
  }
  return out;
}

RunOptions quiet(bool resume = false) {
  RunOptions options;
  options.progress = nullptr;
  options.resume = resume;
  return options;
}

// Fake rows with a prediction of `padding` bytes, to fill a small disk quickly.
class PaddedBackend : public test::FakeBackend {
 public:
  size_t padding = 0;
  SampleResult run_cell(const SampleGroup& group, const Cell& cell, int sample_index) override {
    SampleResult r = FakeBackend::run_cell(group, cell, sample_index);
    r.prediction += std::string(padding, 'x');
    return r;
  }
};

// Raises SIGKILL on itself when asked for its `kill_at`-th row (0-based): the process dies
// between two rows, in the middle of a batch, or before its first row.
class KillingBackend : public test::FakeBackend {
 public:
  int kill_at = -1;
  SampleResult run_cell(const SampleGroup& group, const Cell& cell, int sample_index) override {
    if (rows_run == kill_at) raise(SIGKILL);
    return FakeBackend::run_cell(group, cell, sample_index);
  }
};

std::map<std::string, int> reference_rows(const fs::path& dir, const SweepPlan& plan,
                                          size_t padding = 0) {
  const fs::path db = dir / "reference.db";
  {
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    PaddedBackend backend;
    backend.padding = padding;
    run_sweep(plan, backend, store, RunInfo{}, quiet());
  }
  return rows_of(db);
}

// Runs `body` in a child process; returns its wait status.
template <typename Body>
int in_child(Body&& body) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    int code = 0;
    try {
      code = body();
    } catch (...) {
      code = 99;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return status;
}

void expect_subset(const std::map<std::string, int>& part,
                   const std::map<std::string, int>& whole) {
  for (const auto& [row, count] : part) {
    EXPECT_EQ(count, 1) << "duplicated row " << row;
    EXPECT_TRUE(whole.count(row)) << "a row the uninterrupted run does not have: " << row;
  }
}

TEST(SweepFaults, SigkillBeforeEveryRowThenResumeGivesTheUninterruptedRows) {
  const fs::path dir = fresh_dir("every_row");
  const SweepPlan plan = small_plan();
  ASSERT_EQ(plan.total_rows(), 25);
  const auto reference = reference_rows(dir, plan);
  ASSERT_EQ(reference.size(), 25u);
  for (int kill_at = 0; kill_at < 25; ++kill_at) {
    SCOPED_TRACE("killed before row " + std::to_string(kill_at));
    const fs::path db = dir / ("killed" + std::to_string(kill_at) + ".db");
    const int status = in_child([&] {
      ResultStore store(db, ResultStore::Mode::kReadWrite);
      KillingBackend backend;
      backend.kill_at = kill_at;
      run_sweep(plan, backend, store, RunInfo{}, quiet());
      return 0;
    });
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    const auto survived = rows_of(db);
    EXPECT_LE(survived.size(), static_cast<size_t>(kill_at));
    expect_subset(survived, reference);
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    test::FakeBackend backend;
    const RunSummary summary = run_sweep(plan, backend, store, RunInfo{}, quiet(/*resume=*/true));
    EXPECT_EQ(summary.rows_skipped, static_cast<int64_t>(survived.size()));
    EXPECT_EQ(summary.rows_written + summary.rows_skipped, 25);
    EXPECT_EQ(rows_of(db), reference);
  }
}

// Kills after seeded random delays while rows of 20 KB are written as fast as the store takes
// them, so most kills land inside SQLite's commit of a row; the database is killed and resumed
// again and again (1,200 rows: no round finishes) before the last resume finishes it.
TEST(SweepFaults, SigkillAtRandomTimesMidCommitThenResumeGivesTheUninterruptedRows) {
  const fs::path dir = fresh_dir("random_times");
  const SweepPlan plan = plan_sweep(parse_sweep_config(nlohmann::json::parse(R"({
    "models": ["m.gguf"],
    "benchmarks": [{"benchmark": "ruler", "tasks": ["niah_single_1", "vt"], "lengths": [1024, 2048],
                    "samples": 30}],
    "policies": ["full", "snapkv", "streamingllm", "cake"],
    "budgets": ["25%", "10%", "64"]})"),
                                                       "faults.json"),
                                    Shard{});
  const auto reference = reference_rows(dir, plan, /*padding=*/20000);
  ASSERT_EQ(static_cast<int64_t>(reference.size()), plan.total_rows());
  const fs::path db = dir / "killed.db";
  std::mt19937 rng(18);
  int killed = 0;
  for (int round = 0; round < 12; ++round) {
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) {
      try {
        ResultStore store(db, ResultStore::Mode::kReadWrite);
        PaddedBackend backend;
        backend.padding = 20000;
        run_sweep(plan, backend, store, RunInfo{}, quiet(/*resume=*/true));
      } catch (...) {
        _exit(99);
      }
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 60000));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    if (WIFSIGNALED(status))
      ++killed;
    else
      ASSERT_EQ(WEXITSTATUS(status), 0) << "the sweep failed instead of being killed";
    if (fs::exists(db)) expect_subset(rows_of(db), reference);
  }
  EXPECT_GE(killed, 6);
  {
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    PaddedBackend backend;
    backend.padding = 20000;
    run_sweep(plan, backend, store, RunInfo{}, quiet(/*resume=*/true));
  }
  EXPECT_EQ(rows_of(db), reference);
}

// The child writes the sweep until a write fails; `setup` makes the fault in the child, `after`
// runs there once the sweep has stopped. Exit codes: 0 the error was an InputError naming the
// database and the fix, 1 the sweep finished (no fault), 2 another error, 77 `setup` could not
// make the fault. The error message goes to `message_file`.
template <typename Setup, typename After>
int sweep_until_write_fails(const fs::path& db, const SweepPlan& plan, size_t padding,
                            const fs::path& message_file, Setup&& setup, After&& after) {
  const int status = in_child([&]() -> int {
    if (!setup()) return 77;
    int code = 1;
    try {
      ResultStore store(db, ResultStore::Mode::kReadWrite);
      PaddedBackend backend;
      backend.padding = padding;
      run_sweep(plan, backend, store, RunInfo{}, quiet());
    } catch (const InputError& e) {
      std::ofstream(message_file) << e.what();
      const std::string what = e.what();
      code = what.find(db.string()) != std::string::npos &&
                     what.find("disk has space") != std::string::npos
                 ? 0
                 : 2;
    } catch (const std::exception& e) {
      std::ofstream(message_file) << e.what();
      code = 2;
    }
    after();
    return code;
  });
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

const SweepPlan& bigger_plan() {
  static const SweepPlan plan = plan_sweep(parse_sweep_config(nlohmann::json::parse(R"({
    "models": ["m.gguf"],
    "benchmarks": [{"benchmark": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 40}],
    "policies": ["full", "snapkv"],
    "budgets": ["25%", "10%"]})"),
                                                              "faults.json"),
                                           Shard{});
  return plan;
}

TEST(SweepFaults, FileSizeLimitIsAClearErrorAndKeepsEveryStoredRow) {
  const fs::path dir = fresh_dir("fsize");
  const auto reference = reference_rows(dir, bigger_plan(), /*padding=*/4000);
  const fs::path db = dir / "limited.db";
  const int code = sweep_until_write_fails(
      db, bigger_plan(), 4000, dir / "message.txt",
      [] {
        signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead of killing
        const rlimit limit{96 * 1024, 96 * 1024};
        return setrlimit(RLIMIT_FSIZE, &limit) == 0;
      },
      [] {});
  ASSERT_EQ(code, 0) << read_text(dir / "message.txt");
  const auto stored = rows_of(db);
  EXPECT_GT(stored.size(), 0u);
  EXPECT_LT(stored.size(), reference.size());
  expect_subset(stored, reference);
  // Without the limit the same database resumes to the full sweep.
  {
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    PaddedBackend backend;
    backend.padding = 4000;
    run_sweep(bigger_plan(), backend, store, RunInfo{}, quiet(/*resume=*/true));
  }
  EXPECT_EQ(rows_of(db), reference);
}

// A real full disk: a 256 KiB tmpfs mounted in a private mount namespace of the child (needs
// CAP_SYS_ADMIN; skipped without it). After the failure the child copies the database and its
// WAL out of the tmpfs, as a user would before freeing space; the copy must hold intact rows and
// resume to the full sweep.
TEST(SweepFaults, FullDiskIsAClearErrorAndKeepsEveryStoredRow) {
  const fs::path dir = fresh_dir("full_disk");
  const auto reference = reference_rows(dir, bigger_plan(), /*padding=*/4000);
  const fs::path mount_point = dir / "tmpfs";
  fs::create_directories(mount_point);
  const fs::path db = mount_point / "full.db";
  const fs::path copy = dir / "copy.db";
  const int code = sweep_until_write_fails(
      db, bigger_plan(), 4000, dir / "message.txt",
      [&] {
        return unshare(CLONE_NEWNS) == 0 &&
               mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
               mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=256k") == 0;
      },
      [&] {
        for (const char* suffix : {"", "-wal"})
          if (fs::exists(db.string() + suffix))
            fs::copy_file(db.string() + suffix, copy.string() + suffix,
                          fs::copy_options::overwrite_existing);
      });
  if (code == 77) GTEST_SKIP() << "cannot mount a tmpfs here (needs CAP_SYS_ADMIN)";
  ASSERT_EQ(code, 0) << read_text(dir / "message.txt");
  const auto stored = rows_of(copy);
  EXPECT_GT(stored.size(), 0u);
  EXPECT_LT(stored.size(), reference.size());
  expect_subset(stored, reference);
  {
    ResultStore store(copy, ResultStore::Mode::kReadWrite);
    PaddedBackend backend;
    backend.padding = 4000;
    run_sweep(bigger_plan(), backend, store, RunInfo{}, quiet(/*resume=*/true));
  }
  EXPECT_EQ(rows_of(copy), reference);
}

}  // namespace
}  // namespace kvb
