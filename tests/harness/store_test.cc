#include "harness/sweep/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>

#include "common/errors.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return test::fresh_temp_dir("kvb_store_" + name); }

Cell make_cell(const std::string& policy, const std::string& budget) {
  Cell cell;
  cell.model = "m";
  cell.benchmark = "ruler";
  cell.task = "niah_single_1";
  cell.length = 1024;
  cell.policy = policy;
  cell.budget = budget_from_text(budget);
  return cell;
}

SampleResult make_result(double score) {
  SampleResult r;
  r.sample_id = "s";
  r.prediction = "The special magic number is 1234567.";
  r.references = {"1234567"};
  r.score = score;
  r.ttft_ms = 12.5;
  r.tpot_ms = 3.25;
  r.tokens_in = 1000;
  r.tokens_out = 9;
  r.kept_entries = 4096;
  r.kv_bytes = 1 << 20;
  r.extra = {{"rouge1_recall", 0.5}};
  return r;
}

int64_t count_rows(const fs::path& db) {
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  return store.result_count();
}

TEST(ResultStore, RoundTripsRowsAndRuns) {
  const fs::path db = fresh_dir("roundtrip") / "r.db";
  {
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    RunInfo info;
    info.config_name = "demo";
    info.config = {{"name", "demo"}};
    info.models = {{{"name", "m"}, {"sha256", "ab"}}};
    const int64_t run = store.begin_run(info);
    EXPECT_FALSE(info.run_uuid.empty());
    const int64_t cell = store.ensure_cell(make_cell("snapkv", "25%"));
    EXPECT_EQ(store.ensure_cell(make_cell("snapkv", "25%")), cell);
    store.insert_result(cell, 0, run, make_result(1.0));
    store.insert_result(cell, 1, run, make_result(0.0));
    // The same (cell, sample) twice is refused: a resumed run never double-counts.
    EXPECT_THROW(store.insert_result(cell, 1, run, make_result(0.5)), InputError);
    store.finish_run(run, "finished");
  }
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  const auto rows = store.load_rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].cell.policy, "snapkv");
  EXPECT_EQ(rows[0].cell.budget_text(), "25%");
  EXPECT_EQ(rows[0].result.references, std::vector<std::string>{"1234567"});
  EXPECT_DOUBLE_EQ(rows[0].result.tpot_ms, 3.25);
  EXPECT_EQ(rows[0].result.kv_bytes, 1 << 20);
  EXPECT_EQ(rows[0].result.extra["rouge1_recall"], 0.5);
  EXPECT_EQ(rows[1].result.score, 0.0);
  const auto runs = store.load_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].info.status, "finished");
  EXPECT_EQ(runs[0].info.models[0]["sha256"], "ab");
  EXPECT_EQ(store.finished_rows().size(), 2u);
}

TEST(ResultStore, CorruptFileIsAFormatErrorAndStaysUntouched) {
  const fs::path db = fresh_dir("corrupt") / "r.db";
  const std::string junk(5000, 'x');
  std::ofstream(db, std::ios::binary) << junk;
  EXPECT_THROW(ResultStore(db, ResultStore::Mode::kReadWrite), FormatError);
  EXPECT_THROW(ResultStore(db, ResultStore::Mode::kReadOnly), FormatError);
  std::ifstream in(db, std::ios::binary);
  std::string after((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(after, junk);
  EXPECT_FALSE(fs::exists(db.string() + "-wal"));
}

TEST(ResultStore, DamagedPagesAreDetectedBeforeWriting) {
  const fs::path db = fresh_dir("damaged") / "r.db";
  {
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    RunInfo info;
    const int64_t run = store.begin_run(info);
    const int64_t cell = store.ensure_cell(make_cell("snapkv", "25%"));
    for (int i = 0; i < 200; ++i) store.insert_result(cell, i, run, make_result(1.0));
  }
  // Checkpointed into the main file by the close above; scribble over a middle page.
  const auto size = fs::file_size(db);
  ASSERT_GT(size, 8192u);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(4096 * (size / 4096 / 2)));  // a page header
    const std::string garbage(2048, '\x5a');
    f.write(garbage.data(), garbage.size());
  }
  const auto bytes_before = fs::file_size(db);
  EXPECT_THROW(ResultStore(db, ResultStore::Mode::kReadWrite), FormatError);
  EXPECT_EQ(fs::file_size(db), bytes_before);
}

TEST(ResultStore, ForeignSqliteDatabaseIsRefused) {
  const fs::path db = fresh_dir("foreign") / "r.db";
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  sqlite3_exec(raw, "CREATE TABLE mine(x); INSERT INTO mine VALUES (1);", nullptr, nullptr,
               nullptr);
  sqlite3_close(raw);
  EXPECT_THROW(ResultStore(db, ResultStore::Mode::kReadWrite), FormatError);
  raw = nullptr;
  sqlite3_open(db.c_str(), &raw);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(raw, "SELECT count(*) FROM sqlite_master", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 1);  // no kvbench tables were added
  sqlite3_finalize(stmt);
  sqlite3_close(raw);
}

TEST(ResultStore, LockedDatabaseIsAClearErrorAndKeepsRows) {
  const fs::path db = fresh_dir("locked") / "r.db";
  int64_t cell = 0, run = 0;
  {
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    RunInfo info;
    run = store.begin_run(info);
    cell = store.ensure_cell(make_cell("snapkv", "25%"));
    store.insert_result(cell, 0, run, make_result(1.0));
  }
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  try {
    ResultStore store(db, ResultStore::Mode::kReadWrite, /*busy_timeout_ms=*/100);
    store.insert_result(cell, 1, run, make_result(1.0));
    FAIL() << "writing into a locked database succeeded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("locked"), std::string::npos) << e.what();
  }
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_EQ(count_rows(db), 1);
}

TEST(ResultStore, MissingOrUnwritableFolder) {
  EXPECT_THROW(ResultStore("/nonexistent-kvb/r.db", ResultStore::Mode::kReadWrite), InputError);
  // A regular file where a folder should be (root ignores permission bits, not this).
  const fs::path dir = fresh_dir("unwritable");
  std::ofstream(dir / "file") << "x";
  try {
    ResultStore(dir / "file" / "r.db", ResultStore::Mode::kReadWrite);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("r.db"), std::string::npos);
  }
  EXPECT_THROW(ResultStore(dir / "absent.db", ResultStore::Mode::kReadOnly), InputError);
  EXPECT_FALSE(fs::exists(dir / "absent.db"));
}

TEST(ResultStore, MergeSkipsRowsAlreadyPresent) {
  const fs::path dir = fresh_dir("merge");
  for (const auto& [name, first] : {std::pair{"a.db", 0}, std::pair{"b.db", 1}}) {
    ResultStore store(dir / name, ResultStore::Mode::kReadWrite);
    RunInfo info;
    const int64_t run = store.begin_run(info);
    const int64_t cell = store.ensure_cell(make_cell("snapkv", "25%"));
    store.insert_result(cell, first, run, make_result(first));
    store.insert_result(cell, 5, run, make_result(0.5));  // in both
  }
  ResultStore out(dir / "out.db", ResultStore::Mode::kReadWrite);
  ResultStore a(dir / "a.db", ResultStore::Mode::kReadOnly);
  ResultStore b(dir / "b.db", ResultStore::Mode::kReadOnly);
  auto first = out.merge_from(a);
  EXPECT_EQ(first.rows_added, 2);
  auto second = out.merge_from(b);
  EXPECT_EQ(second.rows_added, 1);
  EXPECT_EQ(second.rows_skipped, 1);
  auto again = out.merge_from(a);
  EXPECT_EQ(again.rows_added, 0);
  EXPECT_EQ(again.runs_added, 0);
  EXPECT_EQ(out.result_count(), 3);
  EXPECT_EQ(out.load_runs().size(), 2u);
}

}  // namespace
}  // namespace kvb
