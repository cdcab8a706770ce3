// Where tests find the fixtures, the default model and the built CLI. Tests that need a file that
// is absent call GTEST_SKIP() with a message naming the file and how to obtain it.
#pragma once

#include <filesystem>

namespace kvb::test {

std::filesystem::path source_dir();
std::filesystem::path binary_dir();
// ../shared/fixtures beside the checkout, or $KVB_FIXTURES.
std::filesystem::path fixtures_dir();
// models/SmolLM2-135M-Instruct.Q4_1.gguf placed by harness/scripts/setup.sh, or $KVB_MODEL.
std::filesystem::path default_model_path();
// models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf placed by `harness/scripts/get-model.sh
// qwen2.5-coder-0.5b`, or $KVB_LONG_MODEL: the 32K-context model of the `long-model` tests.
std::filesystem::path long_model_path();
std::filesystem::path kvbench_binary();

#define KVB_REQUIRE_FILE(path)                                                              \
  do {                                                                                      \
    if (!std::filesystem::exists(path))                                                     \
      GTEST_SKIP() << "missing " << (path) << " (run harness/scripts/setup.sh, or provide " \
                   << "../shared/fixtures)";                                                \
  } while (0)

#define KVB_REQUIRE_LONG_MODEL()                                                \
  do {                                                                          \
    if (!std::filesystem::exists(kvb::test::long_model_path()))                 \
      GTEST_SKIP() << "missing " << kvb::test::long_model_path()                \
                   << " (run harness/scripts/get-model.sh qwen2.5-coder-0.5b)"; \
  } while (0)

}  // namespace kvb::test
