#include "harness/commands/args.h"

#include <algorithm>
#include <cstdlib>

#include "common/errors.h"

namespace kvb {

Args::Args(std::string command, const std::vector<std::string>& argv, std::set<std::string> flags)
    : command_(std::move(command)) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      values_.emplace("", arg);
      continue;
    }
    std::string key = arg.substr(2);
    const auto eq = key.find('=');
    if (eq != std::string::npos) {
      values_.emplace(key.substr(0, eq), key.substr(eq + 1));
    } else if (flags.count(key)) {
      values_.emplace(key, "true");
    } else {
      if (i + 1 >= argv.size())
        throw InputError("kvbench " + command_ + ": --" + key + " needs a value");
      values_.emplace(key, argv[++i]);
    }
  }
}

bool Args::has(const std::string& key) const { return values_.count(key) > 0; }

std::optional<std::string> Args::maybe(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get(const std::string& key) const {
  auto value = maybe(key);
  if (!value) throw InputError("kvbench " + command_ + ": missing --" + key);
  return *value;
}

std::string Args::get_or(const std::string& key, const std::string& fallback) const {
  return maybe(key).value_or(fallback);
}

static int parse_int(const std::string& command, const std::string& key, const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0')
    throw InputError("kvbench " + command + ": --" + key + " expects an integer, got '" + text +
                     "'");
  return static_cast<int>(value);
}

int Args::get_int(const std::string& key) const { return parse_int(command_, key, get(key)); }

int Args::get_int(const std::string& key, int fallback) const {
  auto value = maybe(key);
  return value ? parse_int(command_, key, *value) : fallback;
}

double Args::get_double(const std::string& key, double fallback) const {
  auto value = maybe(key);
  if (!value) return fallback;
  char* end = nullptr;
  const double parsed = std::strtod(value->c_str(), &end);
  if (end == value->c_str() || *end != '\0')
    throw InputError("kvbench " + command_ + ": --" + key + " expects a number, got '" + *value +
                     "'");
  return parsed;
}

std::vector<int> Args::get_indices(const std::string& key, const std::string& what) const {
  const std::string text = get(key);
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 0)
      throw InputError("kvbench " + command_ + ": --" + key + " expects comma-separated " + what +
                       " from 0, got '" + item + "' in '" + text + "'");
    out.push_back(static_cast<int>(value));
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> Args::all(const std::string& key) const {
  std::vector<std::string> out;
  auto [begin, end] = values_.equal_range(key);
  for (auto it = begin; it != end; ++it) out.push_back(it->second);
  return out;
}

void Args::allow_only(const std::set<std::string>& known) const {
  for (const auto& [key, value] : values_) {
    if (key.empty() || known.count(key)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "--" : ", --") + k;
    throw InputError("kvbench " + command_ + ": unknown option --" + key + " (known: " + list +
                     ")");
  }
}

}  // namespace kvb
