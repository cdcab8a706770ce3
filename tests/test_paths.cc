#include "tests/test_paths.h"

#include <cstdlib>

namespace kvb::test {

std::filesystem::path source_dir() { return KVB_SOURCE_DIR; }
std::filesystem::path binary_dir() { return KVB_BINARY_DIR; }

std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("KVB_FIXTURES")) return env;
  return source_dir().parent_path() / "shared" / "fixtures";
}

std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("KVB_MODEL")) return env;
  return source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::filesystem::path long_model_path() {
  if (const char* env = std::getenv("KVB_LONG_MODEL")) return env;
  return source_dir() / "models" / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf";
}

std::filesystem::path kvbench_binary() { return binary_dir() / "kvbench"; }

}  // namespace kvb::test
