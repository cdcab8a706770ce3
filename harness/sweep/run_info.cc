#include "harness/sweep/run_info.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "common/errors.h"

namespace kvb {
namespace {

std::string run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  pclose(pipe);
  while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
  return output;
}

}  // namespace

std::string git_commit_of_source() {
  const std::string commit =
      run_command("git -C '" + std::string(KVB_SOURCE_DIR) + "' rev-parse HEAD 2>/dev/null");
  if (commit.size() != 40) return "unknown";
  const std::string dirty = run_command("git -C '" + std::string(KVB_SOURCE_DIR) +
                                        "' status --porcelain --untracked-files=no 2>/dev/null");
  return dirty.empty() ? commit : commit + "-dirty";
}

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof buffer - 1) != 0) return "unknown";
  return buffer;
}

std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return model + " (" + std::to_string(std::thread::hardware_concurrency()) + " logical cores)";
}

std::string gpu_description() {
#ifdef KVB_HAVE_CUDA  // engine/CMakeLists.txt defines it for every target linking the engine
  const std::string name =
      run_command("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null");
  return name.empty() ? "none" : name;
#else
  return "none (CPU build)";
#endif
}

nlohmann::json library_versions() {
  return {{"sqlite", sqlite3_libversion()},
          {"nlohmann_json", std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                                std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                                std::to_string(NLOHMANN_JSON_VERSION_PATCH)},
          {"compiler", __VERSION__},
#ifdef NDEBUG
          {"build", "release"},
#else
          {"build", "debug"},
#endif
          {"cxx_standard", __cplusplus}};
}

}  // namespace kvb
