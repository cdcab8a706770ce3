// Faults met by the kvbench binary itself on a tiny real sweep (SmolLM2,
// harness/commands/cli_run.cc): a second `kvbench run` on a database in use is refused; a model
// file changed or truncated between a run and its --resume is caught (the SHA-256 the run recorded)
// before any row is written; a corrupt data file names the file and line and leaves the stored rows
// as they were. The runner- level faults (SIGKILL at many points, a full disk) are in
// sweep_faults_test.cc.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "harness/sweep/store.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class RunFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVB_REQUIRE_FILE(test::kvbench_binary());
    KVB_REQUIRE_FILE(test::default_model_path());
    dir_ = fs::temp_directory_path() /
           ("kvb_run_faults_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  // `kvbench ARGS`, stdout and stderr captured.
  Outcome kvbench(const std::string& arguments, const std::string& tag = "") {
    const fs::path out = dir_ / ("stdout" + tag), err = dir_ / ("stderr" + tag);
    const std::string command = test::kvbench_binary().string() + " " + arguments + " > " +
                                out.string() + " 2> " + err.string() + " < /dev/null";
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
  }

  // Writes a sweep config of `units` RULER samples of Full KV (one row each) on `model`.
  fs::path config(const fs::path& model, int units) {
    const fs::path path = dir_ / "sweep.json";
    std::ofstream(path) << nlohmann::json{
        {"name", "faults"},
        {"models", {{{"name", "smollm2"}, {"path", model.string()}}}},
        {"benchmarks",
         {{{"benchmark", "ruler"},
           {"tasks", {"niah_single_1"}},
           {"lengths", {512}},
           {"samples", units}}}},
        {"policies", {"full"}},
        {"max_new_tokens", 8}}.dump();
    return path;
  }

  int64_t rows(const fs::path& db) {
    return ResultStore(db, ResultStore::Mode::kReadOnly).result_count();
  }

  fs::path dir_;
};

// While one run holds the database, a second is refused at once with a message that says so; the
// first finishes with its rows, each once; afterwards --resume runs and finds nothing to do.
TEST_F(RunFaultsTest, SecondRunOnADatabaseInUseIsRefused) {
  const fs::path sweep = config(test::default_model_path(), 4);
  const fs::path db = dir_ / "shared.db";
  const std::string run = "run --no-report --config " + sweep.string() + " --db " + db.string();
  std::fflush(nullptr);
  const pid_t first = fork();
  ASSERT_GE(first, 0);
  if (first == 0) {
    const std::string command = test::kvbench_binary().string() + " " + run + " > " +
                                (dir_ / "first.out").string() + " 2>&1 < /dev/null";
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until the first run has begun its sweep (its run record exists; it took the database's
  // lock before that). Probing the lock itself could take it from under the first run.
  bool running = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       !running && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!fs::exists(db)) continue;
    try {
      running = !ResultStore(db, ResultStore::Mode::kReadOnly).load_runs().empty();
    } catch (const std::exception&) {
      // the schema is not there yet
    }
  }
  ASSERT_TRUE(running) << "the first run never began: " << read_file(dir_ / "first.out");
  const Outcome second = kvbench(run, "2");
  int status = 0;
  waitpid(first, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(dir_ / "first.out");
  EXPECT_EQ(second.code, 2) << second.err;
  EXPECT_NE(second.err.find("in use by another kvbench run"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find(db.string()), std::string::npos) << second.err;
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  EXPECT_EQ(store.result_count(), 4);
  EXPECT_EQ(store.load_runs().size(), 1u);  // the refused run left no run record
  const Outcome resumed = kvbench(run + " --resume", "3");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("0 rows written, 4 already there"), std::string::npos) << resumed.out;
}

// Shard 0/2 of a sweep runs on a copy of the model; before shard 1/2 resumes into the same database
// the copy is changed by one byte, then truncated: both are refused before any row, and the
// restored file resumes. A changed byte in the weights still loads, so only the recorded SHA-256
// can tell.
TEST_F(RunFaultsTest, ModelChangedOrTruncatedBeforeResumeIsCaughtBeforeAnyRow) {
  const fs::path model = dir_ / "model.gguf";
  fs::copy_file(test::default_model_path(), model);
  const fs::path db = dir_ / "r.db";
  const std::string run =
      "run --no-report --config " + config(model, 2).string() + " --db " + db.string();
  Outcome o = kvbench(run + " --shard 0/2");
  ASSERT_EQ(o.code, 0) << o.err;
  ASSERT_EQ(rows(db), 1);

  const auto size = fs::file_size(model);
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - 1));
    const char last = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(size - 1));
    f.put(static_cast<char>(last ^ 0x01));
  }
  o = kvbench(run + " --resume --shard 1/2");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("SHA-256"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(model.string()), std::string::npos) << o.err;
  EXPECT_EQ(rows(db), 1);

  fs::resize_file(model, size / 2);
  o = kvbench(run + " --resume --shard 1/2");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find(model.string()), std::string::npos) << o.err;
  EXPECT_EQ(rows(db), 1);

  fs::copy_file(test::default_model_path(), model, fs::copy_options::overwrite_existing);
  o = kvbench(run + " --resume --shard 1/2");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(rows(db), 2);
}

// A LongBench sweep over two data files whose second has a broken line 2: the error names the file
// and line, the database holds no row of the broken file (and no partial row), and once the file
// is mended --resume completes the sweep.
TEST_F(RunFaultsTest, CorruptDataFileNamesFileAndLineAndKeepsStoredRows) {
  const fs::path data = dir_ / "longbench";
  fs::create_directories(data);
  const auto record = [](const std::string& id) {
    return nlohmann::json{{"input", "Which animal does the paper study?"},
                          {"context", "This paper studies the migration of barn owls in Norway."},
                          {"answers", {"barn owls"}},
                          {"all_classes", nullptr},
                          {"_id", id}}
        .dump();
  };
  std::ofstream(data / "qasper.jsonl") << record("a0") << "\n" << record("a1") << "\n";
  std::ofstream(data / "multifieldqa_en.jsonl") << record("b0") << "\n{\"input\": \"cut off\n";
  const fs::path sweep = dir_ / "longbench.json";
  std::ofstream(sweep) << nlohmann::json{
      {"name", "corrupt"},
      {"models", {test::default_model_path().string()}},
      {"benchmarks",
       {{{"benchmark", "longbench"},
         {"tasks", {"qasper", "multifieldqa_en"}},
         {"data_dir", data.string()}}}},
      {"policies", {"full"}},
      {"max_new_tokens", 4}}.dump();
  const fs::path db = dir_ / "r.db";
  const std::string run = "run --no-report --config " + sweep.string() + " --db " + db.string();
  Outcome o = kvbench(run);
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_NE(o.err.find((data / "multifieldqa_en.jsonl").string() + ":2"), std::string::npos)
      << o.err;
  if (fs::exists(db)) {
    ResultStore store(db, ResultStore::Mode::kReadOnly);
    for (const auto& row : store.load_rows()) EXPECT_EQ(row.cell.task, "qasper");
  }
  std::ofstream(data / "multifieldqa_en.jsonl") << record("b0") << "\n" << record("b1") << "\n";
  o = kvbench(fs::exists(db) ? run + " --resume" : run);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(rows(db), 4);
}

}  // namespace
}  // namespace kvb
