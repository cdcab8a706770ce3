#include "tests/test_paths.h"

#include <cstdlib>

namespace kvb::test {

std::filesystem::path source_dir() { return KVB_SOURCE_DIR; }
std::filesystem::path binary_dir() { return KVB_BINARY_DIR; }

std::vector<std::filesystem::path> data_roots() {
  std::vector<std::filesystem::path> roots;
  if (const char* env = std::getenv("KVB_FIXTURES")) roots.emplace_back(env);
  roots.push_back(source_dir() / "data");
  roots.push_back(source_dir().parent_path() / "shared" / "fixtures");  // a second place only
  return roots;
}

std::filesystem::path fixture(const std::filesystem::path& relative) {
  for (const auto& root : data_roots())
    if (std::filesystem::exists(root / relative)) return root / relative;
  return source_dir() / "data" / relative;
}

std::vector<InfiniteBenchGolden> infinitebench_goldens() {
  const auto hand = source_dir() / "tests" / "goldens" / "infinitebench";
  std::vector<InfiniteBenchGolden> goldens = {
      {"passkey", hand / "hand_passkey.jsonl", 50.00},
      {"kv_retrieval", hand / "hand_kv_retrieval.jsonl", 66.67},
      {"longbook_choice_eng", hand / "hand_longbook_choice_eng.jsonl", 50.00}};
  // OpenBMB/InfiniteBench README, GPT-4 row.
  const std::pair<const char*, double> published[] = {
      {"passkey", 100.00},        {"number_string", 100.00},      {"kv_retrieval", 89.00},
      {"longbook_qa_eng", 22.44}, {"longbook_choice_eng", 67.25}, {"longdialogue_qa_eng", 8.50},
      {"longbook_qa_chn", 25.96}, {"math_find", 60.00},           {"code_run", 23.25},
      {"code_debug", 37.06}};
  for (const auto& [task, score] : published) {
    const auto file = fixture("infinitebench/golden/gpt4_preds_" + std::string(task) + ".jsonl");
    if (std::filesystem::exists(file)) goldens.push_back({task, file, score});
  }
  return goldens;
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

std::filesystem::path fresh_temp_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace kvb::test
