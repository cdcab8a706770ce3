// The backend-ops table (backend_ops_test.cc) is meant to hold every CUDA op against its CPU twin.
// This test keeps it so without a GPU (it reads source files, so it runs in the CPU CI): every op a
// kernels/cuda header declares — a function that takes a cudaStream_t — must be called, as
// `cuda::op(`, by the table's sources (backend_ops_test.cc and the tests/cuda headers it includes,
// followed transitively). An op added without a row fails here, naming it and its header. And every
// op has a CPU twin of the same name in kernels/cpu (the project's rule for a CUDA op), but for the
// few listed below with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace kvb::test {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string without_line_comments(const std::string& text) {
  return std::regex_replace(text, std::regex("//[^\n]*"), "");
}

// Op name -> header, for every declaration `T name(... cudaStream_t ...);` in kernels/cuda/*.h.
std::map<std::string, std::string> declared_ops() {
  const std::regex declaration(R"((\w+)\s*\(([^;{}()]*)\)\s*;)");
  std::map<std::string, std::string> ops;
  for (const auto& entry : fs::directory_iterator(source_dir() / "kernels" / "cuda")) {
    if (entry.path().extension() != ".h") continue;
    const std::string text = without_line_comments(read_text(entry.path()));
    for (std::sregex_iterator it(text.begin(), text.end(), declaration), end; it != end; ++it)
      if ((*it)[2].str().find("cudaStream_t") != std::string::npos)
        ops[(*it)[1].str()] = "kernels/cuda/" + entry.path().filename().string();
  }
  return ops;
}

// backend_ops_test.cc and every tests/cuda header it includes, directly or not, concatenated.
std::string table_sources() {
  const std::regex include(R"(#include "(tests/cuda/[^"]+)\")");
  std::set<std::string> seen;
  std::vector<std::string> pending = {"tests/cuda/backend_ops_test.cc"};
  std::string all;
  while (!pending.empty()) {
    const std::string file = pending.back();
    pending.pop_back();
    if (!seen.insert(file).second) continue;
    const std::string text = read_text(source_dir() / file);
    all += text;
    for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it)
      pending.push_back((*it)[1].str());
  }
  return all;
}

TEST(BackendOpsCoverage, EveryOpOfKernelsCudaIsCalledByTheTable) {
  const std::map<std::string, std::string> ops = declared_ops();
  // The headers hold ~45 ops today; far fewer means the declaration pattern stopped matching.
  ASSERT_GT(ops.size(), 30u) << "kernels/cuda/*.h under " << source_dir();
  const std::string table = without_line_comments(table_sources());
  for (const auto& [op, header] : ops)
    EXPECT_TRUE(std::regex_search(table, std::regex("cuda::" + op + R"(\s*\()")))
        << op << " (" << header << ") has no row in the backend-ops table: add one to "
        << "tests/cuda/backend_ops_*.h comparing it with its CPU twin";
}

// CUDA ops whose CPU twin has another name, and why.
const std::map<std::string, std::string> kTwinExceptions = {
    {"matmul_f32out", "the bf16 GEMM's twin is kernels/cpu/matmul.h's matmul (f32 in and out)"},
    {"matmul_skinny_mma", "an opt-in tensor-core kernel of the same product: matmul's twin"},
    {"dropkv_scores_materialised", "the benchmark's naive baseline of dropkv_scores"},
    {"binary_mark_tokens",
     "turns the EAS index list into the device's bit mask; the CPU keeps the list"},
};

TEST(BackendOpsCoverage, EveryOpOfKernelsCudaHasACpuTwinOfTheSameName) {
  std::string cpu;
  for (const auto& entry : fs::directory_iterator(source_dir() / "kernels" / "cpu"))
    if (entry.path().extension() == ".h") cpu += without_line_comments(read_text(entry.path()));
  for (const auto& [op, header] : declared_ops()) {
    const bool twin = std::regex_search(cpu, std::regex("\\b" + op + R"(\s*\()"));
    if (kTwinExceptions.count(op)) {
      EXPECT_FALSE(twin) << op << " now has a CPU twin of its name: drop it from kTwinExceptions";
      continue;
    }
    EXPECT_TRUE(twin) << op << " (" << header
                      << ") has no function of the same name in kernels/cpu/*.h: name its CPU "
                      << "twin after it";
  }
}

}  // namespace
}  // namespace kvb::test
