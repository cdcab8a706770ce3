#include "datasets/generation.h"

#include <cctype>

namespace kvb {

int TokenCounter::exact(std::string_view text) const {
  return static_cast<int>(
      tokenizer_.encode(text, /*add_bos=*/false, /*parse_special=*/true).size());
}

int TokenCounter::fast(std::string_view text) {
  int total = 0;
  size_t piece_start = 0;
  const auto add_piece = [&](size_t end) {
    if (end <= piece_start) return;
    std::string piece(text.substr(piece_start, end - piece_start));
    auto it = memo_.find(piece);
    if (it == memo_.end()) it = memo_.emplace(piece, exact(piece)).first;
    total += it->second;
    piece_start = end;
  };
  for (size_t i = 1; i + 1 < text.size(); ++i) {
    if (text[i] != ' ') continue;
    const unsigned char before = static_cast<unsigned char>(text[i - 1]);
    const unsigned char after = static_cast<unsigned char>(text[i + 1]);
    if (!std::isspace(before) && std::isalnum(after)) add_piece(i);
  }
  add_piece(text.size());
  return total;
}

}  // namespace kvb
