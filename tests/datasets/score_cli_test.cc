// `kvbench score` end to end (harness/commands/cli_score.cc): InfiniteBench files with known scores
// (hand-scored; GPT-4's published table where its files are found), the JSON contract ({"score"},
// "per_sample" with --per-sample), LongBench records and LongBench-E buckets, RULER/NIAH records,
// and bad input: a malformed line (error names file and line), a missing file, an unknown dataset
// or benchmark, a record missing a field. Every record counts (num_samples equals the number of
// non-blank lines).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/test_paths.h"

namespace kvb {
namespace {

using nlohmann::json;

struct CommandResult {
  int exit_code;
  std::string out;
  std::string err;
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ScoreCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::kvbench_binary()))
      GTEST_SKIP() << "missing " << test::kvbench_binary() << " (build the kvbench target)";
    dir_ = std::filesystem::temp_directory_path() /
           ("kvb_score_cli_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  CommandResult score(const std::string& args) {
    const std::string command = test::kvbench_binary().string() + " score " + args + " > " +
                                (dir_ / "out").string() + " 2> " + (dir_ / "err").string();
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir_ / "out"), slurp(dir_ / "err")};
  }
  std::filesystem::path dir_;
};

TEST_F(ScoreCliTest, InfiniteBenchFilesGiveTheirKnownScores) {
  // Hand-scored files, and GPT-4's published files where found (tests/test_paths.h).
  for (const auto& golden : test::infinitebench_goldens()) {
    const auto r = score("--benchmark infinitebench --dataset " + golden.task + " --predictions " +
                         golden.file.string() + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_NEAR(out["score"].get<double>(), golden.score, 0.005) << golden.file;
    // No record dropped: every non-blank line is scored.
    std::ifstream in(golden.file);
    size_t lines = 0;
    for (std::string line; std::getline(in, line);)
      lines += line.find_first_not_of(" \t\r") != std::string::npos;
    EXPECT_EQ(out["num_samples"].get<size_t>(), lines) << golden.file;
  }
}

TEST_F(ScoreCliTest, JsonHasScoreAndPerSampleOnRequest) {
  const auto path =
      write("p.jsonl", R"({"prediction": "The pass key is 123.", "ground_truth": "123"})"
                       "\n"
                       R"({"pred": "no", "label": "456"})"
                       "\n");
  auto r = score("--benchmark infinitebench --dataset passkey --predictions " + path + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_DOUBLE_EQ(out["score"].get<double>(), 50.0);
  EXPECT_FALSE(out.contains("per_sample"));
  r = score("--benchmark infinitebench --dataset passkey --predictions " + path +
            " --json --per-sample");
  out = json::parse(r.out);
  EXPECT_EQ(out["per_sample"], json::array({1.0, 0.0}));
  r = score("--benchmark infinitebench --dataset passkey --predictions " + path);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("50.00"), std::string::npos) << r.out;
}

TEST_F(ScoreCliTest, LongBenchRecordsAndLongBenchEBuckets) {
  const auto path = write(
      "trec.jsonl",
      R"({"pred": "\nLocation\nmore", "answers": ["Location"], "all_classes": ["Location", "Other"], "length": 3000})"
      "\n"
      R"({"pred": "Other", "answers": ["Location"], "all_classes": ["Location", "Other"], "length": 9000})"
      "\n");
  auto r = score("--benchmark longbench --dataset trec --predictions " + path + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json::parse(r.out)["score"].get<double>(), 50.0);
  r = score("--benchmark longbench --dataset trec_e --predictions " + path + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_DOUBLE_EQ(out["buckets"]["0-4k"].get<double>(), 100.0);
  EXPECT_TRUE(out["buckets"]["4-8k"].is_null());  // empty bucket: NaN in eval.py
  EXPECT_DOUBLE_EQ(out["buckets"]["8k+"].get<double>(), 0.0);
}

TEST_F(ScoreCliTest, RulerAndNiahRecords) {
  const auto ruler = write("r.jsonl", R"({"pred": " 123 and 456\u0001", "outputs": ["123", "789"]})"
                                      "\n");
  auto r = score("--benchmark ruler --dataset niah_multikey_1 --predictions " + ruler + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json::parse(r.out)["score"].get<double>(), 50.0);
  r = score("--benchmark ruler --dataset qa_1 --predictions " + ruler + " --json");
  EXPECT_DOUBLE_EQ(json::parse(r.out)["score"].get<double>(), 100.0);
  const auto niah =
      write("n.jsonl", R"({"pred": "Eat a sandwich and sit in Dolores Park on a sunny day."})"
                       "\n");
  r = score("--benchmark niah --dataset niah --predictions " + niah + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json::parse(r.out)["score"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(json::parse(r.out)["substring_match"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(json::parse(r.out)["rouge1_f10"].get<double>(), 7.27);  // rouge_score: 7.2727...
}

TEST_F(ScoreCliTest, BadInputIsAClearError) {
  const auto malformed = write("bad.jsonl", R"({"prediction": "1", "ground_truth": "1"})"
                                            "\n\n"
                                            R"({"prediction": "2", )"
                                            "\n");
  auto r = score("--benchmark infinitebench --dataset passkey --predictions " + malformed);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("bad.jsonl:3"), std::string::npos) << r.err;

  const auto missing_field = write("nolabel.jsonl", R"({"prediction": "1"})"
                                                    "\n");
  r = score("--benchmark infinitebench --dataset passkey --predictions " + missing_field);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("nolabel.jsonl:1"), std::string::npos) << r.err;

  r = score("--benchmark infinitebench --dataset passkey --predictions " +
            (dir_ / "absent.jsonl").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("absent.jsonl"), std::string::npos) << r.err;

  r = score("--benchmark infinitebench --dataset passkeys --predictions " + malformed);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown InfiniteBench task 'passkeys'"), std::string::npos) << r.err;
  r = score("--benchmark longbench --dataset nq --predictions " + malformed);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown LongBench dataset 'nq'"), std::string::npos) << r.err;
  r = score("--benchmark ruler --dataset niah_single_9 --predictions " + malformed);
  EXPECT_EQ(r.exit_code, 2);
  r = score("--benchmark longbook --dataset x --predictions " + malformed);
  EXPECT_EQ(r.exit_code, 2);

  const auto empty = write("empty.jsonl", "\n");
  r = score("--benchmark infinitebench --dataset passkey --predictions " + empty);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no records"), std::string::npos) << r.err;

  const auto no_classes = write("lsht.jsonl", R"({"pred": "x", "answers": ["y"]})"
                                              "\n");
  r = score("--benchmark longbench --dataset lsht --predictions " + no_classes);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("all_classes"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvb
