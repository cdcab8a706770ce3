// The kvbench binary as a user meets it: exit codes and messages for bad input, and that existing
// results survive every failure.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <fstream>

#include "harness/store.h"
#include "tests/harness/fake_backend.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

Outcome kvbench(const std::string& arguments, const fs::path& dir) {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string command = test::kvbench_binary().string() + " " + arguments + " > " +
                              out.string() + " 2> " + err.string() + " < /dev/null";
  const int status = std::system(command.c_str());
  Outcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream o_in(out), e_in(err);
  o.out.assign(std::istreambuf_iterator<char>(o_in), {});
  o.err.assign(std::istreambuf_iterator<char>(e_in), {});
  return o;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVB_REQUIRE_FILE(test::kvbench_binary());
    dir_ = fs::temp_directory_path() /
           ("kvb_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // A database with some rows, made with the fake backend.
  fs::path make_db(const std::string& name) {
    const fs::path db = dir_ / name;
    const SweepConfig config = parse_sweep_config(nlohmann::json::parse(R"({
      "models": ["m.gguf"],
      "benchmarks": [{"benchmark": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 2},
                     {"benchmark": "niah", "lengths": [1024, 2048], "depths": [0, 100]}],
      "policies": ["full", "snapkv", "snapkv+art"], "budgets": ["25%", "10%"]})"), "t.json");
    ResultStore store(db, ResultStore::Mode::kReadWrite);
    test::FakeBackend backend;
    RunOptions options;
    options.progress = nullptr;
    run_sweep(plan_sweep(config, Shard{}), backend, store, RunInfo{}, options);
    return db;
  }
  fs::path dir_;
};

TEST_F(CliTest, TableLayoutsAndFormats) {
  const fs::path db = make_db("r.db");
  for (const auto& layout : {"ruler", "niah", "latency", "memory"}) {
    for (const auto& format : {"md", "csv", "latex"}) {
      const Outcome o = kvbench(std::string("table --db ") + db.string() + " --layout " + layout +
                                    " --format " + format, dir_);
      EXPECT_EQ(o.code, 0) << layout << " " << format << ": " << o.err;
      EXPECT_NE(o.out.find("snapkv+art"), std::string::npos) << layout << format << o.out;
    }
  }
  const Outcome json = kvbench("table --db " + db.string() + " --layout ruler --json", dir_);
  EXPECT_EQ(nlohmann::json::parse(json.out)["tables"][0]["columns"][2], "niah_single_1");
  const Outcome bad = kvbench("table --db " + db.string() + " --layout rulerr", dir_);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("rulerr"), std::string::npos);
}

TEST_F(CliTest, CorruptDatabaseIsAClearErrorEverywhereAndStaysUntouched) {
  const fs::path db = dir_ / "corrupt.db";
  std::ofstream(db) << std::string(4096, 'k');
  const std::string before = read_file(db);
  for (const std::string args : {"table --db " + db.string() + " --layout ruler",
                                 "report --db " + db.string() + " --out " + (dir_ / "rep").string(),
                                 "merge --out " + db.string() + " " + make_db("good.db").string(),
                                 "compare --baseline " + db.string() + " --candidate " +
                                     (dir_ / "good.db").string()}) {
    const Outcome o = kvbench(args, dir_);
    EXPECT_EQ(o.code, 3) << args << ": " << o.err;
    EXPECT_NE(o.err.find("corrupt.db"), std::string::npos) << o.err;
  }
  EXPECT_EQ(read_file(db), before);
}

TEST_F(CliTest, LockedOutputOfMergeKeepsItsRows) {
  const fs::path out = make_db("out.db");
  const fs::path shard = make_db("shard.db");
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(out.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  const Outcome o = kvbench("merge --out " + out.string() + " " + shard.string(), dir_);
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("locked"), std::string::npos) << o.err;
  ResultStore store(out, ResultStore::Mode::kReadOnly);
  EXPECT_EQ(store.result_count(), 2 * 5 + 4 * 5);
}

TEST_F(CliTest, ReportIntoUnwritableFolderFailsClearly) {
  const fs::path db = make_db("r.db");
  std::ofstream(dir_ / "blocker") << "x";
  const Outcome o = kvbench("report --db " + db.string() + " --out " + (dir_ / "blocker" / "rep").string(), dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("blocker"), std::string::npos) << o.err;
  const Outcome ok = kvbench("report --db " + db.string() + " --out " + (dir_ / "rep").string(), dir_);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(dir_ / "rep" / "index.html"));
}

TEST_F(CliTest, MergeAndCompareRoundTrip) {
  const fs::path a = make_db("a.db");
  const Outcome merged = kvbench("merge --out " + (dir_ / "m.db").string() + " " + a.string(), dir_);
  EXPECT_EQ(merged.code, 0) << merged.err;
  const fs::path summary = dir_ / "baseline.json";
  EXPECT_EQ(kvbench("compare --candidate " + a.string() + " --write-baseline " + summary.string(),
                    dir_).code, 0);
  const Outcome same = kvbench("compare --baseline " + summary.string() + " --candidate " +
                                   (dir_ / "m.db").string(), dir_);
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("0 of"), std::string::npos) << same.out;
  // Lower one accuracy entry's baseline bar: a candidate under it regresses.
  auto json = nlohmann::json::parse(read_file(summary));
  json["accuracy"][0]["score"] = json["accuracy"][0]["score"].get<double>() + 50;
  std::ofstream(summary) << json.dump();
  const Outcome worse = kvbench("compare --baseline " + summary.string() + " --candidate " +
                                    a.string(), dir_);
  EXPECT_EQ(worse.code, 1);
  EXPECT_NE(worse.out.find("REGRESSION"), std::string::npos) << worse.out;
}

}  // namespace
}  // namespace kvb
