// Command-line arguments of one subcommand: "--key value" pairs and "--flag" switches.
// Unknown or missing flags are errors naming the flag and the command's usage.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvb {

class Args {
 public:
  // `flags` lists the switches that take no value (e.g. "json", "chat").
  Args(std::string command, const std::vector<std::string>& argv, std::set<std::string> flags);

  const std::string& command() const { return command_; }
  bool has(const std::string& key) const;
  bool flag(const std::string& key) const { return has(key); }
  std::string get(const std::string& key) const;  // throws InputError when absent
  std::string get_or(const std::string& key, const std::string& fallback) const;
  int get_int(const std::string& key, int fallback) const;
  int get_int(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  // A comma-separated list of integers >= 0 ("3,0,17"); `what` names them in the error
  // ("token ids", "line numbers").
  std::vector<int> get_indices(const std::string& key, const std::string& what) const;
  std::optional<std::string> maybe(const std::string& key) const;
  // Values of a repeated key, or positional arguments with key "".
  std::vector<std::string> all(const std::string& key) const;
  // Throws InputError naming the first key not in `known` (a typo should not be silently ignored).
  void allow_only(const std::set<std::string>& known) const;

 private:
  std::string command_;
  std::multimap<std::string, std::string> values_;
};

}  // namespace kvb
