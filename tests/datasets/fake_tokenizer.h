// A small deterministic tokenizer for the generator tests: GPT-2-like pre-tokens (" word",
// single digits, punctuation runs, whitespace runs) each one token, and "<|...|>" special tokens
// when parse_special. Ids are assigned on first sight, so decode() inverts encode().
#pragma once

#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "engine/tokenizer.h"

namespace kvb::test {

class FakeTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = false) const override {
    std::vector<TokenId> ids;
    if (add_bos) ids.push_back(0);
    size_t i = 0;
    const auto is_letter = [&](size_t p) {
      return p < text.size() && (std::isalpha(static_cast<unsigned char>(text[p])) ||
                                 static_cast<unsigned char>(text[p]) >= 0x80);
    };
    while (i < text.size()) {
      size_t end = i + 1;
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if (parse_special && text.substr(i, 2) == "<|") {
        const size_t close = text.find("|>", i);
        if (close != std::string_view::npos) end = close + 2;
      } else if (is_letter(i) || (c == ' ' && is_letter(i + 1))) {
        while (is_letter(end)) ++end;
      } else if (std::isdigit(c)) {
        // one digit per token (SmolLM style)
      } else if (std::isspace(c)) {
        while (end < text.size() && std::isspace(static_cast<unsigned char>(text[end])) &&
               !(text[end] == ' ' && is_letter(end + 1)))
          ++end;
      } else {
        while (end < text.size() && std::ispunct(static_cast<unsigned char>(text[end])) &&
               text.substr(end, 2) != "<|")
          ++end;
      }
      ids.push_back(id_of(std::string(text.substr(i, end - i))));
      i = end;
    }
    return ids;
  }
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const override {
    std::string out;
    for (TokenId id : ids) {
      if (id == 0) continue;
      const std::string& piece = pieces_[id];
      if (skip_special && piece.rfind("<|", 0) == 0) continue;
      out += piece;
    }
    return out;
  }
  std::string token_text(TokenId id) const override { return pieces_[id]; }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  TokenId bos_id() const override { return 0; }
  TokenId eos_id() const override { return 0; }
  bool is_end_of_generation(TokenId id) const override { return id == 0; }
  bool adds_bos_by_default() const override { return false; }
  std::string kind() const override { return "fake"; }

 private:
  TokenId id_of(const std::string& piece) const {
    auto it = ids_.find(piece);
    if (it != ids_.end()) return it->second;
    const TokenId id = static_cast<TokenId>(pieces_.size());
    pieces_.push_back(piece);
    ids_.emplace(piece, id);
    return id;
  }
  mutable std::map<std::string, TokenId> ids_;
  mutable std::vector<std::string> pieces_{"<bos>"};
};

// A ChatML frame like SmolLM2's template renders around one user message.
}  // namespace kvb::test
