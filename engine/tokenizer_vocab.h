// What both tokenizer implementations share: the vocabulary as a GGUF stores it (token texts,
// types, SPM scores, BPE merges, BOS/EOS rules) and the special-token splitter that runs before
// either algorithm (llama.cpp's `tokenizer_st_partition`).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"

namespace kvb {

// GGUF `tokenizer.ggml.token_type` values; SentencePiece's piece types use the same numbers.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocabulary {
  std::vector<std::string> tokens;  // id -> text (byte-level BPE: in byte-to-unicode form)
  std::vector<TokenType> types;     // id -> type; empty means all kNormal
  std::vector<float> scores;        // SentencePiece merge priorities (empty for BPE)
  std::vector<std::string> merges;  // byte-level BPE: "left right", rank = index
  TokenId bos = -1;
  TokenId eos = -1;
  TokenId unk = -1;
  std::vector<TokenId> end_of_generation;  // EOS plus chat end tokens (<|im_end|>, <|eot_id|>)
  bool add_bos = false;
  bool add_space_prefix = true;  // SentencePiece: a space before the text and after specials
  std::string pre;               // byte-level BPE pre-tokenizer name (tokenizer.ggml.pre)
  std::string source;            // file the vocabulary came from, for error messages

  TokenType type_of(TokenId id) const {
    return types.empty() ? TokenType::kNormal : types[static_cast<size_t>(id)];
  }
  bool is_special(TokenId id) const {
    const TokenType type = type_of(id);
    return type == TokenType::kControl || type == TokenType::kUnknown;
  }
  // Checks sizes and ids; throws FormatError naming `source`.
  void validate() const;
  // Adds the chat end tokens found by text (<|im_end|>, <|eot_id|>, ...) to end_of_generation.
  void add_known_end_tokens();
};

// A piece of the input: either raw text for the tokenizer algorithm or one special token.
struct TextFragment {
  std::string_view text;  // empty when `token` is set
  TokenId token = -1;
};

// Finds special-token strings in text. User-defined tokens are always matched; control and
// unknown tokens only with parse_special (llama.cpp's rule). At each position the longest token
// that matches wins; the scan is linear in the text (tokens are indexed by first byte).
class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocabulary& vocab);
  void split(std::string_view text, bool parse_special, std::vector<TextFragment>* out) const;

 private:
  struct Candidate {
    std::string text;
    TokenId id;
    bool always;  // user-defined: matched even without parse_special
  };
  std::array<std::vector<Candidate>, 256> by_first_byte_;
};

// What a tokenizer answers from its vocabulary alone, the same for BPE and SentencePiece: sizes,
// special ids, token texts and end-of-generation. The vocabulary is validated on construction.
class VocabTokenizer : public Tokenizer {
 public:
  explicit VocabTokenizer(Vocabulary vocab);

  std::string token_text(TokenId id) const override;
  int vocab_size() const override { return static_cast<int>(vocab_.tokens.size()); }
  TokenId bos_id() const override { return vocab_.bos; }
  TokenId eos_id() const override { return vocab_.eos; }
  bool is_end_of_generation(TokenId id) const override;
  bool adds_bos_by_default() const override { return vocab_.add_bos; }

 protected:
  // Throws InputError when `id` is not a token of the vocabulary (decode and token_text).
  void check_id(TokenId id) const;

  Vocabulary vocab_;
};

// Length in bytes of the UTF-8 sequence starting with `lead` (1 for invalid lead bytes).
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace kvb
