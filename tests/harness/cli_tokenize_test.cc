// `kvbench tokenize` as a user runs it: every llama.cpp tokenizer vector (4 vocab-only GGUFs with
// no tensors, 46 strings each) through the built binary, plus flags and bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  return text;
}

// Runs kvbench with `args` (no shell, so any text passes through unchanged).
Result run_kvbench(const std::vector<std::string>& args) {
  const std::string binary = test::kvbench_binary().string();
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close(out_pipe[0]);
    close(err_pipe[0]);
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Result result;
  result.out = slurp(out_pipe[0]);  // outputs here are small: reading one pipe then the other
  result.err = slurp(err_pipe[0]);  // cannot deadlock
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string read_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

class CliTokenize : public ::testing::TestWithParam<const char*> {};

TEST_P(CliTokenize, JsonReproducesEveryFixtureVector) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const fs::path gguf =
      test::fixture("tokenizers") / ("ggml-vocab-" + std::string(GetParam()) + ".gguf");
  KVB_REQUIRE_FILE(gguf);
  const std::string inp = read_file(gguf.string() + ".inp");
  std::istringstream out_lines(read_file(gguf.string() + ".out"));
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  const fs::path text_file =
      fs::temp_directory_path() / ("kvb_cli_tokenize_" + std::to_string(getpid()) + ".txt");
  int checked = 0;
  for (size_t pos = 0, end; (end = inp.find(kSeparator, pos)) != std::string::npos;
       pos = end + kSeparator.size()) {
    const std::string text = inp.substr(pos, end - pos);
    std::string line;
    ASSERT_TRUE(std::getline(out_lines, line));
    std::vector<int> expected;
    std::istringstream ids(line);
    for (int id; ids >> id;) expected.push_back(id);
    // Alternate the two ways of passing text; --text=... keeps texts that start with "--" whole.
    Result result;
    if (checked % 2 == 0) {
      result = run_kvbench({"tokenize", "--model", gguf.string(), "--text=" + text, "--json"});
    } else {
      std::ofstream(text_file, std::ios::binary) << text;
      result = run_kvbench(
          {"tokenize", "--model", gguf.string(), "--text-file", text_file.string(), "--json"});
    }
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const auto json = nlohmann::json::parse(result.out);
    EXPECT_EQ(json["ids"].get<std::vector<int>>(), expected) << nlohmann::json(text).dump();
    const std::string vocab = GetParam();
    const bool sentencepiece = vocab == "llama-spm" || vocab == "phi-3";
    EXPECT_EQ(json["tokenizer"], sentencepiece ? "spm" : "bpe:" + vocab);
    ++checked;
  }
  fs::remove(text_file);
  EXPECT_EQ(checked, 46);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, CliTokenize,
                         ::testing::Values("llama-spm", "gpt-2", "starcoder", "phi-3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(CliTokenizeFlags, BosAndParseSpecialOnTheDefaultModel) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  KVB_REQUIRE_FILE(test::default_model_path());
  const std::string model = test::default_model_path().string();
  const auto ids = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"tokenize", "--model", model, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Result result = run_kvbench(args);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return nlohmann::json::parse(result.out)["ids"].get<std::vector<int>>();
  };
  // Ids from the `tokenizers` package (tests/goldens/tokenizer/smollm2_ids.json).
  EXPECT_EQ(ids({"--text", "<|im_start|>user\nHi there<|im_end|>\n", "--parse-special"}),
            (std::vector<int>{1, 4093, 198, 26843, 665, 2, 198}));
  const auto plain = ids({"--text", "<|im_start|>"});
  EXPECT_GT(plain.size(), 1u);  // without --parse-special the marker is ordinary text
  // SmolLM2's BOS is <|im_start|> (id 1); --bos prepends it.
  const auto with_bos = ids({"--text", "Hi", "--bos"});
  ASSERT_EQ(with_bos.size(), ids({"--text", "Hi"}).size() + 1);
  EXPECT_EQ(with_bos.front(), 1);
}

TEST(CliTokenizeErrors, BadInputExitsNonZeroWithAMessage) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const Result missing = run_kvbench({"tokenize", "--model", "/nonexistent.gguf", "--text", "x"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent.gguf"), std::string::npos);
  const Result no_text = run_kvbench({"tokenize", "--model", "/nonexistent.gguf"});
  EXPECT_EQ(no_text.exit_code, 2);
  EXPECT_NE(no_text.err.find("--text"), std::string::npos);
  const fs::path not_gguf =
      fs::temp_directory_path() / ("kvb_not_gguf_" + std::to_string(getpid()));
  std::ofstream(not_gguf) << "this is not a GGUF file";
  const Result bad = run_kvbench({"tokenize", "--model", not_gguf.string(), "--text", "x"});
  fs::remove(not_gguf);
  EXPECT_EQ(bad.exit_code, 3) << bad.err;
}

}  // namespace
}  // namespace kvb
