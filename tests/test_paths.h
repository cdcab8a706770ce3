// Where tests find their data, the default model and the built CLI. Tests that need a file that
// is absent call GTEST_SKIP() with a message naming the file and how to obtain it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvb::test {

std::filesystem::path source_dir();
std::filesystem::path binary_dir();
// The folders tests read data files from, in order: $KVB_FIXTURES when set, the data/ folder
// harness/scripts/setup.sh fills (essays, word lists, llama.cpp's tokenizer vectors, lm-eval's
// copy of the LongBench config), then ../shared/fixtures beside the checkout as a second place.
std::vector<std::filesystem::path> data_roots();
// The first data root holding `relative` ("haystack/pg_essays", "tokenizers/x.gguf");
// data/`relative` when none does, so that a skip message names where setup.sh puts it.
std::filesystem::path fixture(const std::filesystem::path& relative);
// InfiniteBench prediction files in the published layout with their known scores: the
// hand-scored files of tests/goldens/infinitebench/ always, and GPT-4's published result files
// (infinitebench/golden/gpt4_preds_TASK.jsonl, with the InfiniteBench README's table) when a data
// root holds them. No package carries the published files.
struct InfiniteBenchGolden {
  std::string task;
  std::filesystem::path file;
  double score;  // points, 2 decimals
};
std::vector<InfiniteBenchGolden> infinitebench_goldens();
// models/SmolLM2-135M-Instruct.Q4_1.gguf placed by harness/scripts/setup.sh, or $KVB_MODEL.
std::filesystem::path default_model_path();
// models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf placed by `harness/scripts/get-model.sh
// qwen2.5-coder-0.5b`, or $KVB_LONG_MODEL: the 32K-context model of the `long-model` tests.
std::filesystem::path long_model_path();
std::filesystem::path kvbench_binary();
// An empty folder `name` under the system's temporary folder (removed first if it exists).
std::filesystem::path fresh_temp_dir(const std::string& name);

#define KVB_REQUIRE_FILE(path)                                                   \
  do {                                                                           \
    if (!std::filesystem::exists(path))                                          \
      GTEST_SKIP() << "missing " << (path) << " (run harness/scripts/setup.sh)"; \
  } while (0)

#define KVB_REQUIRE_LONG_MODEL()                                                \
  do {                                                                          \
    if (!std::filesystem::exists(kvb::test::long_model_path()))                 \
      GTEST_SKIP() << "missing " << kvb::test::long_model_path()                \
                   << " (run harness/scripts/get-model.sh qwen2.5-coder-0.5b)"; \
  } while (0)

}  // namespace kvb::test
