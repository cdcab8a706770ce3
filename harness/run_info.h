// Facts recorded with every run so that a number in a table can be traced to the code, machine and
// model file that produced it: git commit, host, CPU, GPU, library versions, model file SHA-256.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace kvb {

// SHA-256 of a file as lowercase hex (FIPS 180-4). Throws InputError when unreadable.
std::string sha256_file(const std::filesystem::path& path);
std::string sha256_hex(const std::string& bytes);

std::string git_commit_of_source();  // "unknown" outside a git checkout
std::string host_name();
std::string cpu_description();       // model name and logical core count
std::string gpu_description();       // "none" on a CPU build
nlohmann::json library_versions();

}  // namespace kvb
