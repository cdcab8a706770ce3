// kvbench gen-data end to end with the default model: JSONL of Samples for each benchmark, and
// clear errors (exit code 2, a message naming the input) for an unknown task or missing data.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "datasets/sample.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

using CliRun = test::CommandRun;  // out: stdout and stderr

CliRun gen_data(const std::string& arguments) {
  return test::run_command(test::kvbench_binary().string() + " gen-data --model " +
                           test::default_model_path().string() + " " + arguments + " 2>&1");
}

std::vector<Sample> read_samples(const fs::path& path) {
  std::vector<Sample> samples;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    samples.push_back(nlohmann::json::parse(line).get<Sample>());
  return samples;
}

class GenDataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    KVB_REQUIRE_FILE(test::kvbench_binary());
    KVB_REQUIRE_FILE(test::default_model_path());
    KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
    out_ = fs::temp_directory_path() / ("kvb_gen_data_" + std::to_string(::getpid()) + ".jsonl");
  }
  void TearDown() override { fs::remove(out_); }
  fs::path out_;
};

TEST_F(GenDataCli, RulerWritesFittedSamplesWithTheChatFrame) {
  const CliRun run = gen_data(
      "--benchmark ruler --task niah_single_1 --length 4096 --num 2 --seed 3 "
      "--json --data-dir " +
      test::fixture("haystack/pg_essays").parent_path().parent_path().string() + " --out " +
      out_.string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("\"samples\":2"), std::string::npos) << run.out;
  const std::vector<Sample> samples = read_samples(out_);
  ASSERT_EQ(samples.size(), 2u);
  for (const Sample& s : samples) {
    EXPECT_EQ(s.benchmark, "ruler");
    EXPECT_FALSE(s.use_chat_template);
    EXPECT_EQ(s.context_part.rfind("<|im_start|>system\n", 0), 0u);
    EXPECT_LE(s.extra.at("ruler_length").get<int>(), 4096);
    EXPECT_NE(s.context_part.find(s.references[0]), std::string::npos);
  }
}

TEST_F(GenDataCli, NiahGridAndInfiniteBench) {
  CliRun run = gen_data("--benchmark niah --length 1500,2500 --num 3 --out " + out_.string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const std::vector<Sample> niah = read_samples(out_);
  ASSERT_EQ(niah.size(), 6u);
  EXPECT_EQ(niah[4].length, 2500);
  EXPECT_EQ(niah[4].depth, 50);
  run = gen_data("--benchmark infinitebench --task passkey --length 4096 --num 2 --out " +
                 out_.string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const std::vector<Sample> passkey = read_samples(out_);
  ASSERT_EQ(passkey.size(), 2u);
  EXPECT_NE(passkey[1].context_part.find("The pass key is " + passkey[1].references[0]),
            std::string::npos);
}

TEST_F(GenDataCli, BadInputIsAClearError) {
  CliRun run =
      gen_data("--benchmark ruler --task niah_single_7 --length 4096 --out " + out_.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("unknown RULER task 'niah_single_7'"), std::string::npos) << run.out;
  run = gen_data(
      "--benchmark ruler --task niah_single_2 --length 4096 --data-dir /nonexistent "
      "--out " +
      out_.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("/nonexistent"), std::string::npos) << run.out;
  const fs::path empty = fs::temp_directory_path() / "kvb_gen_data_empty";
  fs::create_directories(empty);
  run = gen_data("--benchmark ruler --task qa_1 --length 4096 --data-dir " + empty.string() +
                 " --out " + out_.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("squad.json"), std::string::npos) << run.out;
  run = gen_data("--benchmark longbench --task qasper --length 4096 --out " + out_.string());
  EXPECT_EQ(run.exit_code, 2);
}

}  // namespace
}  // namespace kvb
