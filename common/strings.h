// String helpers every layer may use without leaning on another. Header-only.
#pragma once

#include <string>
#include <string_view>

namespace kvb {

// The pieces with `separator` between them (Python's `separator.join(pieces)`): any range of
// strings or string views (a vector, a set, a registry's list of names).
template <typename Pieces>
std::string join(const Pieces& pieces, std::string_view separator) {
  std::string out;
  bool first = true;
  for (const auto& piece : pieces) {
    if (!first) out += separator;
    out += std::string_view(piece);
    first = false;
  }
  return out;
}

}  // namespace kvb
