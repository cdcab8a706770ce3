// Regression tests for the harness readers' bugs of issue 18: each says whether a fuzz target of
// tests/fuzz/ found it or a review of the reader it covers did.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>

#include "common/errors.h"
#include "engine/cache_policy.h"
#include "harness/sweep/config.h"
#include "harness/sweep/store.h"
#include "harness/sweep/sweep.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

fs::path database_with_a_row(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "kvb_fuzz_regressions";
  fs::create_directories(dir);
  const fs::path db = dir / name;
  fs::remove(db);
  ResultStore store(db, ResultStore::Mode::kReadWrite);
  RunInfo info;
  const int64_t run = store.begin_run(info);
  Cell cell;
  cell.model = "m";
  cell.benchmark = "ruler";
  cell.task = "niah_single_1";
  cell.length = 1024;
  cell.policy = "full";
  SampleResult r;
  r.references = {"42"};
  store.insert_result(store.ensure_cell(cell), 0, run, r);
  store.finish_run(run, "finished");
  return db;
}

void execute(const fs::path& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(handle);
}

std::string load_error(const fs::path& db) {
  try {
    ResultStore(db, ResultStore::Mode::kReadOnly).load_rows();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";  // loaded, or failed with another type: both are the bug
}

// results_db_fuzz found: a database that passes SQLite's integrity check but whose cell key is not
// JSON made load_rows() (kvbench table, report, merge) die of an uncaught nlohmann parse_error.
TEST(FuzzRegressions, DamagedCellKeyIsAFormatErrorNamingTheDatabase) {
  const fs::path db = database_with_a_row("cell_key.db");
  execute(db, "UPDATE cells SET cell_key = '{\"model\": \"m\", \"benchm'");
  const std::string error = load_error(db);
  EXPECT_NE(error.find(db.string()), std::string::npos) << error;
  EXPECT_NE(error.find("damaged cell key"), std::string::npos) << error;
}

TEST(FuzzRegressions, ReferencesOfTheWrongTypeAreAFormatError) {
  const fs::path db = database_with_a_row("references.db");
  execute(db, "UPDATE results SET references_json = '[1, 2]'");
  EXPECT_NE(load_error(db).find(db.string()), std::string::npos);
}

// results_db_fuzz found (2026-12-05, one flipped bit): a result row whose cell_id names no cell
// passes SQLite's integrity check, and load_rows()'s join dropped it silently (the fuzz property
// "load_rows() and result_count() agree" failed). Opening the file now refuses it.
TEST(FuzzRegressions, ResultRowWithoutItsCellIsAFormatErrorNamingTheDatabase) {
  const fs::path db = database_with_a_row("orphan.db");
  execute(db, "PRAGMA foreign_keys=OFF; UPDATE results SET cell_id = cell_id + 100");
  const std::string error = load_error(db);
  EXPECT_NE(error.find(db.string()), std::string::npos) << error;
  EXPECT_NE(error.find("refer to cells it does not hold"), std::string::npos) << error;
}

// sweep_config_fuzz found (2026-12-05): a budget of "1e71" tokens passed Budget::parse and its
// conversion to a whole count was undefined behaviour (UBSan float-cast-overflow).
TEST(FuzzRegressions, TokenBudgetBeyondIntIsAnInputError) {
  EXPECT_THROW(Budget::parse("1e71"), InputError);
  EXPECT_THROW(Budget::parse("2147483648"), InputError);
  EXPECT_EQ(Budget::parse("2147483647").tokens_for(10), 2147483647);
}

// Review: a cell key whose length is a float beyond int: get<int>() of it is undefined behaviour
// (UBSan's float-cast-overflow); cell_from_json now refuses it.
TEST(FuzzRegressions, CellFieldsMustBeIntegersInRange) {
  Cell cell;
  cell.model = "m";
  cell.benchmark = "ruler";
  cell.task = "vt";
  cell.length = 1024;
  cell.policy = "full";
  nlohmann::json json = cell.to_json();
  EXPECT_EQ(cell_from_json(json).key(), cell.key());
  for (const nlohmann::json& bad : {nlohmann::json(1e300), nlohmann::json(2.5),
                                    nlohmann::json(uint64_t{1} << 40), nlohmann::json("1024")}) {
    json["length"] = bad;
    EXPECT_THROW(cell_from_json(json), FormatError) << bad.dump();
  }
  json["length"] = 1024;
  json["dense_layers"] = 3;
  EXPECT_THROW(cell_from_json(json), FormatError);
  json["dense_layers"] = {0, 1e20};
  EXPECT_THROW(cell_from_json(json), FormatError);
  const fs::path db = database_with_a_row("float_length.db");
  execute(db, "UPDATE cells SET cell_key = replace(cell_key, '1024', '1e300')");
  EXPECT_NE(load_error(db).find(db.string()), std::string::npos);
}

// sweep_config_fuzz found: a number beyond double (1e999) makes nlohmann's parser throw
// out_of_range, which load_sweep_config did not catch (it caught parse_error only): kvbench run
// died with an uncaught exception instead of naming the config.
TEST(FuzzRegressions, SweepConfigNumberOverflowIsAFormatErrorNamingTheFile) {
  const fs::path dir = fs::temp_directory_path() / "kvb_fuzz_regressions";
  fs::create_directories(dir);
  const fs::path config = dir / "overflow.json";
  std::ofstream(config) << R"({"models": ["m.gguf"], "max_new_tokens": 1e999})";
  try {
    load_sweep_config(config);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(config.string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvb
