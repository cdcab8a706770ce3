#include "datasets/data_paths.h"

#include <algorithm>
#include <fstream>
#include <system_error>

#include "common/errors.h"

namespace kvb {
namespace fs = std::filesystem;

namespace {

void add_unique(std::vector<fs::path>& roots, const fs::path& root) {
  if (root.empty()) return;
  const fs::path normal = root.lexically_normal();
  for (const fs::path& existing : roots)
    if (existing == normal) return;
  roots.push_back(normal);
}

}  // namespace

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

DataSearch::DataSearch(const fs::path& user_dir) {
  add_unique(roots_, user_dir);
  const fs::path bin = executable_dir();
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (!bin.empty()) {
    add_unique(roots_, bin.parent_path() / "data");  // checkout: build/kvbench
    add_unique(roots_, bin.parent_path() / "share" / "kvbench" / "data");  // PREFIX/bin/kvbench
  }
  if (!ec) add_unique(roots_, cwd / "data");
  // A second place only, after the repository's own data/ (data_paths.h, item 3).
  if (!bin.empty()) add_unique(roots_, bin.parent_path().parent_path() / "shared" / "fixtures");
  if (!ec) add_unique(roots_, cwd.parent_path() / "shared" / "fixtures");
}

DataSearch DataSearch::only(std::vector<fs::path> roots) {
  DataSearch search;
  search.roots_ = std::move(roots);  // the defaults dropped
  return search;
}

fs::path DataSearch::find(const std::vector<fs::path>& candidates) const {
  std::error_code ec;
  for (const fs::path& root : roots_)
    for (const fs::path& candidate : candidates)
      if (fs::exists(root / candidate, ec)) return root / candidate;
  return {};
}

std::string DataSearch::describe() const {
  std::string text;
  for (const fs::path& root : roots_) text += (text.empty() ? "" : ", ") + root.string();
  return text;
}

std::vector<fs::path> essay_files(const fs::path& folder, const std::string& what,
                                  const std::string& searched) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!folder.empty() && fs::is_directory(folder, ec))
    for (const auto& entry : fs::directory_iterator(folder))
      if (entry.path().extension() == ".txt") files.push_back(entry.path());
  if (files.empty())
    throw InputError(what + ": " +
                     (folder.empty()
                          ? "no Paul Graham essays (haystack/pg_essays/*.txt) in " +
                                (searched.empty() ? std::string("any data folder") : searched)
                          : "no .txt files in " + folder.string()) +
                     "; " + kSetupDataFix + " (pg_essays/*.txt)");
  std::sort(files.begin(), files.end());
  return files;
}

std::string data_source_label(const fs::path& folder) {
  for (const fs::path& file : {folder / "SOURCE.txt", folder.parent_path() / "SOURCE.txt"}) {
    std::ifstream in(file);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
  }
  return "user data (no SOURCE.txt)";
}

}  // namespace kvb
