// `kvbench calibrate` as a user runs it (SmolLM2-135M, a little text): the projection file it
// writes loads with the model's shape, its JSON summary says which positions the keys came from,
// and a fit on chunks shorter than the model's context says so on stderr, beside its progress.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "policies/binarypc_projection.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Standard output and standard error apart (the JSON summary on one, the warning on the other).
struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

CliRun kvbench(const std::string& arguments, const std::filesystem::path& err_file) {
  const test::CommandRun run = test::run_command(test::kvbench_binary().string() + " " + arguments +
                                                 " 2>" + err_file.string());
  return {run.exit_code, run.out, read_file(err_file)};
}

TEST(CliCalibrate, SaysWhichPositionsTheKeysCameFrom) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  KVB_REQUIRE_FILE(test::default_model_path());
  const std::filesystem::path dir = test::fresh_temp_dir("kvb_cli_calibrate");
  std::filesystem::create_directories(dir / "text");
  std::ofstream notes(dir / "text" / "notes.txt");
  for (int i = 0; i < 3; ++i)  // ~140 tokens, more than --max-tokens
    notes << "The lighthouse keeper counted the ships that passed the harbour every evening, and "
             "wrote their names in a blue ledger beside the lamp. In winter the ledger filled "
             "slowly; in summer he needed a second book before the end of July. ";
  notes.close();
  const std::filesystem::path out = dir / "projection.bin";
  const CliRun run = kvbench("calibrate --model " + test::default_model_path().string() +
                                 " --data " + (dir / "text").string() + " --out " + out.string() +
                                 " --chunk-tokens 16 --max-tokens 64 --iterations 1 --json",
                             dir / "stderr.txt");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = nlohmann::json::parse(run.out);
  EXPECT_EQ(summary["positions_seen"].get<int>(), 16);
  EXPECT_EQ(summary["calibration_tokens"].get<int>(), 64);
  const int max_context = summary["max_context"].get<int>();
  EXPECT_GT(max_context, 16);
  EXPECT_NE(run.err.find("positions 0..15 only"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(std::to_string(max_context)), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("64 of 64 so far"), std::string::npos)
      << "progress per chunk: " << run.err;
  EXPECT_NE(run.err.find("fitting 90 (layer, KV head) projections"), std::string::npos) << run.err;
  const BinaryProjectionSet projection = BinaryProjectionSet::load(out.string());
  EXPECT_EQ(projection.calibration_tokens, 64u);
}

}  // namespace
}  // namespace kvb
