// The kvbench binary as a user meets it: exit codes and messages for bad input, and that existing
// results survive every failure.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <fstream>
#include <map>

#include "harness/sweep/store.h"
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
    dir_ =
        fs::temp_directory_path() /
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
      "policies": ["full", "snapkv", "snapkv+art"], "budgets": ["25%", "10%"]})"),
                                                  "t.json");
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
      const Outcome o = kvbench(
          std::string("table --db ") + db.string() + " --layout " + layout + " --format " + format,
          dir_);
      EXPECT_EQ(o.code, 0) << layout << " " << format << ": " << o.err;
      EXPECT_NE(o.out.find("snapkv+art"), std::string::npos) << layout << format << o.out;
    }
  }
  const Outcome json = kvbench("table --db " + db.string() + " --layout ruler --json", dir_);
  EXPECT_EQ(nlohmann::json::parse(json.out)["tables"][0]["columns"][2], "niah_single_1");
  const Outcome bad = kvbench("table --db " + db.string() + " --layout rulerr", dir_);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("rulerr"), std::string::npos);
  const Outcome paired =
      kvbench("table --db " + db.string() + " --layout paired --against snapkv", dir_);
  EXPECT_EQ(paired.code, 0) << paired.err;
  EXPECT_NE(paired.out.find("paired difference against snapkv"), std::string::npos) << paired.out;
  EXPECT_NE(paired.out.find("| snapkv+art | 25% |"), std::string::npos) << paired.out;
  const Outcome no_reference = kvbench("table --db " + db.string() + " --layout paired", dir_);
  EXPECT_EQ(no_reference.code, 2);
  EXPECT_NE(no_reference.err.find("--against POLICY"), std::string::npos) << no_reference.err;
  const Outcome stray =
      kvbench("table --db " + db.string() + " --layout ruler --against snapkv", dir_);
  EXPECT_EQ(stray.code, 2);
  EXPECT_NE(stray.err.find("--against goes with --layout paired"), std::string::npos);
  const Outcome absent =
      kvbench("table --db " + db.string() + " --layout paired --against h2o", dir_);
  EXPECT_EQ(absent.code, 2);
  EXPECT_NE(absent.err.find("present: "), std::string::npos) << absent.err;
}

TEST_F(CliTest, CorruptDatabaseIsAClearErrorEverywhereAndStaysUntouched) {
  const fs::path db = dir_ / "corrupt.db";
  std::ofstream(db) << std::string(4096, 'k');
  const std::string before = read_file(db);
  for (const std::string args :
       {"table --db " + db.string() + " --layout ruler",
        "report --db " + db.string() + " --out " + (dir_ / "rep").string(),
        "merge --out " + db.string() + " " + make_db("good.db").string(),
        "compare --baseline " + db.string() + " --candidate " + (dir_ / "good.db").string()}) {
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
  const Outcome o =
      kvbench("report --db " + db.string() + " --out " + (dir_ / "blocker" / "rep").string(), dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("blocker"), std::string::npos) << o.err;
  const Outcome ok =
      kvbench("report --db " + db.string() + " --out " + (dir_ / "rep").string(), dir_);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(dir_ / "rep" / "index.html"));
}

TEST_F(CliTest, UnwritableMergeOutputOrBaselineFailsClearlyAndKeepsFiles) {
  const fs::path db = make_db("r.db");
  std::ofstream(dir_ / "blocker") << "x";
  Outcome o =
      kvbench("merge --out " + (dir_ / "blocker" / "m.db").string() + " " + db.string(), dir_);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("blocker"), std::string::npos) << o.err;
  o = kvbench("compare --candidate " + db.string() + " --write-baseline " +
                  (dir_ / "blocker" / "b.json").string(),
              dir_);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("blocker"), std::string::npos) << o.err;
  EXPECT_EQ(read_file(dir_ / "blocker"), "x");
  // A baseline that cannot be summarised (corrupt candidate) leaves the old one as it was.
  std::ofstream(dir_ / "baseline.json") << "{\"old\": true}";
  std::ofstream(dir_ / "corrupt.db") << std::string(4096, 'q');
  o = kvbench("compare --candidate " + (dir_ / "corrupt.db").string() + " --write-baseline " +
                  (dir_ / "baseline.json").string(),
              dir_);
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_EQ(read_file(dir_ / "baseline.json"), "{\"old\": true}");
  EXPECT_EQ(ResultStore(db, ResultStore::Mode::kReadOnly).result_count(), 2 * 5 + 4 * 5);
}

TEST_F(CliTest, MergeAndCompareRoundTrip) {
  const fs::path a = make_db("a.db");
  const Outcome merged =
      kvbench("merge --out " + (dir_ / "m.db").string() + " " + a.string(), dir_);
  EXPECT_EQ(merged.code, 0) << merged.err;
  const fs::path summary = dir_ / "baseline.json";
  EXPECT_EQ(
      kvbench("compare --candidate " + a.string() + " --write-baseline " + summary.string(), dir_)
          .code,
      0);
  const Outcome same = kvbench(
      "compare --baseline " + summary.string() + " --candidate " + (dir_ / "m.db").string(), dir_);
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("0 of"), std::string::npos) << same.out;
  // Lower one accuracy entry's baseline bar: a candidate under it regresses.
  auto json = nlohmann::json::parse(read_file(summary));
  json["accuracy"][0]["score"] = json["accuracy"][0]["score"].get<double>() + 50;
  std::ofstream(summary) << json.dump();
  const Outcome worse =
      kvbench("compare --baseline " + summary.string() + " --candidate " + a.string(), dir_);
  EXPECT_EQ(worse.code, 1);
  EXPECT_NE(worse.out.find("REGRESSION"), std::string::npos) << worse.out;
}

// `kvbench run` checks everything it can before the first row: these fail fast, write nothing and
// leave existing results as they were.
class RunCliTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    if (IsSkipped()) return;
    KVB_REQUIRE_FILE(test::default_model_path());
    config_ = dir_ / "tiny.json";
    std::ofstream(config_) << nlohmann::json{
        {"name", "tiny"},
        {"models", {test::default_model_path().string()}},
        {"benchmarks",
         {{{"benchmark", "ruler"},
           {"tasks", {"niah_single_1"}},
           {"lengths", {512}},
           {"samples", 1}}}},
        {"policies", {"full", "snapkv"}},
        {"budgets", {"50%"}},
        {"max_new_tokens", 12}}.dump();
  }
  fs::path config_;
};

TEST_F(RunCliTest, InvalidConfigNamesTheKeyAndCreatesNoDatabase) {
  auto json = nlohmann::json::parse(read_file(config_));
  json["benchmarks"][0]["lengths"][0] = 0;
  std::ofstream(dir_ / "bad.json") << json.dump();
  const Outcome o = kvbench(
      "run --config " + (dir_ / "bad.json").string() + " --db " + (dir_ / "r.db").string(), dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("benchmarks[0].lengths[0]"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir_ / "r.db"));
  json = nlohmann::json::parse(read_file(config_));
  json["policies"][1] = "snapkvv";
  std::ofstream(dir_ / "bad.json") << json.dump();
  const Outcome unknown = kvbench(
      "run --config " + (dir_ / "bad.json").string() + " --db " + (dir_ / "r.db").string(), dir_);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("policies[1]"), std::string::npos) << unknown.err;
  std::ofstream(dir_ / "broken.json") << "{\"models\": [";
  EXPECT_EQ(kvbench("run --config " + (dir_ / "broken.json").string() + " --db " +
                        (dir_ / "r.db").string(),
                    dir_)
                .code,
            3);
  EXPECT_FALSE(fs::exists(dir_ / "r.db"));
}

TEST_F(RunCliTest, CorruptLockedOrForeignDatabaseAndUnwritableReportFolder) {
  const fs::path corrupt = dir_ / "corrupt.db";
  std::ofstream(corrupt) << std::string(8192, 'z');
  Outcome o = kvbench("run --config " + config_.string() + " --db " + corrupt.string(), dir_);
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_EQ(read_file(corrupt), std::string(8192, 'z'));

  const fs::path db = make_db("existing.db");
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  o = kvbench("run --config " + config_.string() + " --db " + db.string() + " --lock-timeout 0.2",
              dir_);
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("locked"), std::string::npos) << o.err;
  EXPECT_EQ(ResultStore(db, ResultStore::Mode::kReadOnly).result_count(), 30);

  std::ofstream(dir_ / "blocker") << "x";
  o = kvbench("run --config " + config_.string() + " --db " + (dir_ / "new.db").string() +
                  " --report " + (dir_ / "blocker" / "reports").string(),
              dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("blocker"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir_ / "new.db"));
  o = kvbench("run --config " + config_.string() + " --db " + (dir_ / "nofolder" / "r.db").string(),
              dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("nofolder"), std::string::npos) << o.err;
}

// The real engine end to end on a tiny sweep: rows, a table and a report; a repeat needs --resume.
TEST_F(RunCliTest, TinySweepEndToEnd) {
  const fs::path db = dir_ / "tiny.db";
  const std::string run = "run --config " + config_.string() + " --db " + db.string() +
                          " --report " + (dir_ / "report").string();
  Outcome o = kvbench(run, dir_);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("| snapkv | 50% |"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("report: "), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "report" / "index.html"));
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  const auto rows = store.load_rows();
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_GT(row.result.tokens_in, 300);
    EXPECT_GT(row.result.ttft_ms, 0);
    EXPECT_GT(row.result.kv_bytes, 0);
    EXPECT_TRUE(row.result.prefill_reused);
  }
  // SnapKV at 50% holds about half of Full's KV bytes.
  const double ratio = static_cast<double>(rows[1].result.kv_bytes) / rows[0].result.kv_bytes;
  EXPECT_NEAR(ratio, 0.5, 0.05);
  const auto runs = store.load_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].info.status, "finished");
  EXPECT_EQ(runs[0].info.models[0]["sha256"].get<std::string>().size(), 64u);
  o = kvbench(run, dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("--resume"), std::string::npos) << o.err;
  o = kvbench(run + " --resume", dir_);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("0 rows written, 2 already there"), std::string::npos) << o.out;
}

// LongBench and InfiniteBench on the real engine: tiny files in the official layouts with short
// prompts (one chat-templated LongBench dataset, one from the skip list, one generated and one
// loaded InfiniteBench task), their tables, and a missing data folder failing before any row.
TEST_F(RunCliTest, LongBenchAndInfiniteBenchOnSmolLm2) {
  const fs::path longbench = dir_ / "longbench", infinitebench = dir_ / "infinitebench";
  fs::create_directories(longbench);
  fs::create_directories(infinitebench);
  std::ofstream(longbench / "qasper.jsonl")
      << nlohmann::json{{"input", "Which animal does the paper study?"},
                        {"context", "This paper studies the migration of barn owls in Norway."},
                        {"answers", {"barn owls"}},
                        {"all_classes", nullptr},
                        {"_id", "q0"}}
             .dump()
      << "\n";
  std::ofstream(longbench / "trec.jsonl")
      << nlohmann::json{{"input", "Where is Rome?"},
                        {"context", "Question: Where is Oslo?\nType: Location\n"},
                        {"answers", {"Location"}},
                        {"all_classes", {"Location", "Description"}},
                        {"_id", "t0"}}
             .dump()
      << "\n";
  std::ofstream(infinitebench / "longbook_choice_eng.jsonl")
      << nlohmann::json{{"id", 0},
                        {"context", "The cat in this story is named Tom."},
                        {"input", "What is the cat named?"},
                        {"answer", {"Tom"}},
                        {"options", {"Jerry", "Tom", "Spike", "Tyke"}}}
             .dump()
      << "\n";
  nlohmann::json config = {{"name", "tiny-longbench"},
                           {"models", {test::default_model_path().string()}},
                           {"benchmarks",
                            {{{"benchmark", "longbench"},
                              {"tasks", {"qasper", "trec"}},
                              {"data_dir", longbench.string()}},
                             {{"benchmark", "infinitebench"},
                              {"tasks", {"passkey", "longbook_choice_eng"}},
                              {"lengths", {384}},
                              {"data_dir", infinitebench.string()}}}},
                           {"policies", {"full", "snapkv"}},
                           {"budgets", {"50%"}},
                           {"max_new_tokens", 8}};
  std::ofstream(dir_ / "lb.json") << config.dump();
  const fs::path db = dir_ / "lb.db";
  Outcome o = kvbench(
      "run --config " + (dir_ / "lb.json").string() + " --db " + db.string() + " --no-report",
      dir_);
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("### LongBench, "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("### InfiniteBench, "), std::string::npos) << o.out;
  {
    ResultStore store(db, ResultStore::Mode::kReadOnly);
    const auto rows = store.load_rows();
    ASSERT_EQ(rows.size(), 8u);  // 4 samples x (full, snapkv 50%)
    std::map<std::string, int> tokens;
    for (const auto& row : rows) {
      EXPECT_TRUE(row.result.prefill_reused);
      EXPECT_GE(row.result.score, 0.0);
      EXPECT_LE(row.result.score, 1.0);
      tokens[row.cell.task] = static_cast<int>(row.result.tokens_in);
    }
    // The generated passkey prompt fills its 384-token budget; the loaded ones stay short.
    EXPECT_GT(tokens["passkey"], 250);
    EXPECT_LE(tokens["passkey"], 384);
    EXPECT_LT(tokens["qasper"], 300);  // ~210: the template, the chat frame and one sentence
    EXPECT_LT(tokens["trec"], tokens["qasper"]);  // trec is on the skip list: no chat template
  }
  for (const std::string& layout : {std::string("longbench"), std::string("infinitebench")}) {
    const Outcome t =
        kvbench("table --db " + db.string() + " --layout " + layout + " --format csv", dir_);
    EXPECT_EQ(t.code, 0) << t.err;
    EXPECT_NE(t.out.find(layout == "longbench" ? "qasper" : "passkey"), std::string::npos) << t.out;
  }
  config["benchmarks"][0]["data_dir"] = (dir_ / "no-such-folder").string();
  std::ofstream(dir_ / "lb.json") << config.dump();
  o = kvbench("run --config " + (dir_ / "lb.json").string() + " --db " + (dir_ / "x.db").string(),
              dir_);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("benchmarks[0].data_dir"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("no-such-folder"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir_ / "x.db"));
}

}  // namespace
}  // namespace kvb
