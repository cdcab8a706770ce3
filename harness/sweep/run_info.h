// Facts recorded with every run so that a number in a table can be traced to the code, machine and
// model file that produced it: git commit, host, CPU, GPU, library versions, model file SHA-256
// (engine/sha256.h).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace kvb {

std::string git_commit_of_source();  // "unknown" outside a git checkout
std::string host_name();
std::string cpu_description();  // model name and logical core count
std::string gpu_description();  // "none" on a CPU build
nlohmann::json library_versions();

}  // namespace kvb
