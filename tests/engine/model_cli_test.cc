// `kvbench info` and the model-loading errors a new user meets, through the built binary: a missing
// file, a file that is not GGUF, a truncated GGUF, an unknown architecture, absurd sizes. Each must
// exit non-zero with a message naming the file (and the field).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/engine/tiny_gguf.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

using CliRun = test::CommandRun;  // out: stdout, and stderr unless left out

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CliRun kvbench(const std::vector<std::string>& args, bool with_stderr = true) {
  std::string command = quoted(test::kvbench_binary().string());
  for (const auto& a : args) command += " " + quoted(a);
  command += with_stderr ? " 2>&1" : " 2>/dev/null";
  return test::run_command(command);
}

class ModelCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(test::kvbench_binary())) GTEST_SKIP() << "build the kvbench target first";
    dir_ = fs::temp_directory_path() / ("kvb_model_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ModelCliTest, InfoDescribesTheDefaultModel) {
  const auto model = test::default_model_path();
  KVB_REQUIRE_FILE(model);
  const CliRun run = kvbench({"info", "--model", model.string(), "--json"}, false);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto j = nlohmann::json::parse(run.out);
  // Values from the gguf PyPI package's reader (see gguf_test.cc) and the file system.
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["n_layers"], 30);
  EXPECT_EQ(j["n_query_heads"], 9);
  EXPECT_EQ(j["n_kv_heads"], 3);
  EXPECT_EQ(j["context_length"], 8192);
  EXPECT_EQ(j["vocab_size"], 49152);
  EXPECT_EQ(j["tokenizer"], "bpe:smollm");
  EXPECT_EQ(j["chat_template"], "chatml-smollm2");
  EXPECT_EQ(j["weight_dtypes"]["q4_1"], 210);
  EXPECT_EQ(j["weight_dtypes"]["f32"], 61);
  EXPECT_EQ(j["weight_dtypes"]["q8_0"], 1);
  EXPECT_EQ(j["n_tensors"], 272);
  EXPECT_EQ(j["file_bytes"], fs::file_size(model));
  EXPECT_EQ(j["tied_embeddings"], true);
  // 134,515,008 parameters: the sum of the elements of all 272 tensors.
  EXPECT_EQ(j["n_parameters"], 134515008);
  const CliRun human = kvbench({"info", "--model", model.string()});
  ASSERT_EQ(human.exit_code, 0) << human.out;
  EXPECT_NE(human.out.find("q4_1 x 210"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("8192 tokens"), std::string::npos) << human.out;
}

TEST_F(ModelCliTest, InfoOnAPresetAndABuiltGguf) {
  const CliRun preset = kvbench({"info", "--model", "preset:llama-3.1-8b", "--json"}, false);
  ASSERT_EQ(preset.exit_code, 0) << preset.out;
  const auto j = nlohmann::json::parse(preset.out);
  EXPECT_EQ(j["dummy_weights"], true);
  EXPECT_EQ(j["kv_bytes_per_token_bf16"], 131072);
  EXPECT_EQ(j["rope_scaling"]["type"], "llama3");
  EXPECT_EQ(j["n_parameters"], 8030261248);  // Llama-3.1-8B's published 8.03 B
  const fs::path tiny = dir_ / "tiny.gguf";
  test::tiny_gguf().write(tiny);
  const CliRun built = kvbench({"info", "--model", tiny.string(), "--json"}, false);
  ASSERT_EQ(built.exit_code, 0) << built.out;
  EXPECT_EQ(nlohmann::json::parse(built.out)["head_dim"], 4);
}

void expect_error(const CliRun& run, int code, const std::vector<std::string>& needles) {
  EXPECT_EQ(run.exit_code, code) << run.out;
  for (const auto& needle : needles) EXPECT_NE(run.out.find(needle), std::string::npos) << run.out;
}

TEST_F(ModelCliTest, BadModelFilesAreClearErrors) {
  const std::string missing = (dir_ / "nope.gguf").string();
  expect_error(kvbench({"info", "--model", missing}), 2, {missing, "no such file"});

  const fs::path text = dir_ / "notes.gguf";
  std::ofstream(text) << "this is not a model\n";
  expect_error(kvbench({"info", "--model", text.string()}), 3, {text.string(), "not a GGUF file"});

  const auto full = test::tiny_gguf().bytes();
  const fs::path cut = dir_ / "cut.gguf";
  test::GgufBuilder::write_bytes(
      cut, std::vector<uint8_t>(full.begin(), full.begin() + full.size() / 2));
  expect_error(kvbench({"info", "--model", cut.string()}), 3,
               {cut.string(), "GGUF field", "truncated"});

  const fs::path phi = dir_ / "phi.gguf";
  test::TinyGgufOptions o;
  o.architecture = "phi3";
  test::tiny_gguf(o).write(phi);
  expect_error(kvbench({"info", "--model", phi.string()}), 2,
               {phi.string(), "general.architecture 'phi3'"});

  auto absurd = full;
  const uint64_t huge = uint64_t{1} << 61;
  std::memcpy(&absurd[8], &huge, 8);  // tensor_count
  const fs::path big = dir_ / "absurd.gguf";
  test::GgufBuilder::write_bytes(big, absurd);
  expect_error(kvbench({"info", "--model", big.string()}), 3, {big.string(), "tensor_count"});

  expect_error(kvbench({"info", "--model", "preset:gpt-9"}), 2,
               {"unknown preset 'gpt-9'", "llama-3.1-8b"});
  expect_error(kvbench({"info"}), 2, {"--model"});
}

}  // namespace
}  // namespace kvb
