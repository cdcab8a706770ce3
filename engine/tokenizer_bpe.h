// Byte-level BPE (GPT-2 family: SmolLM2, Llama-3, Qwen2.5, StarCoder, GPT-2).
//
// encode: special tokens are cut out first; each remaining fragment is split by the family's
// pre-tokenizer regexes (engine/pretokenizer.h); each piece's bytes are mapped through GPT-2's
// bytes-to-unicode table and merged pairwise, always the pair of lowest merge rank, ties to the
// leftmost (llama.cpp's llm_tokenizer_bpe_session). Llama-3 sets ignore_merges: a piece that is
// already a vocab entry is emitted whole. Results per piece are cached (RULER prompts of 100K+
// tokens repeat the same words); the cache is sharded and locked, so encode is const and
// thread-safe.
// decode: the inverse byte map; control tokens are rendered as their text unless skip_special.
// Decoding does no "clean up tokenization spaces", so decode(encode(x)) == x.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/pretokenizer.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_vocab.h"

namespace kvb {

// A string hash usable with string_view keys (heterogeneous lookup).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

// GPT-2's reversible map of the 256 byte values to printable code points (as UTF-8).
class ByteToUnicode {
 public:
  ByteToUnicode();
  const std::string& encode(unsigned char byte) const { return byte_to_text_[byte]; }
  // The byte a code point stands for, or -1 when it is outside the map.
  int decode(char32_t code_point) const;

 private:
  std::array<std::string, 256> byte_to_text_;
  std::array<int16_t, 324> code_point_to_byte_;  // every mapped code point is below 324
};

class BpeTokenizer : public VocabTokenizer {
 public:
  // Throws FormatError when the vocabulary or its pre-tokenizer name is not usable.
  explicit BpeTokenizer(Vocabulary vocab);
  ~BpeTokenizer() override;

  std::vector<TokenId> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = false) const override;
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const override;
  std::string kind() const override { return "bpe:" + vocab_.pre; }

  // The ids of one pre-tokenized piece (no special-token handling, no cache). Exposed for tests.
  void encode_piece(std::string_view piece, std::vector<TokenId>* out) const;

 private:
  void encode_piece_cached(std::string_view piece, std::vector<TokenId>* out) const;
  int merge_rank(std::string_view left, std::string_view right, std::string* key) const;

  PreTokenizerSpec spec_;
  RegexPreTokenizer pre_tokenizer_;
  SpecialTokenSplitter specials_;
  ByteToUnicode bytes_;
  StringMap<TokenId> token_ids_;
  StringMap<int> merge_ranks_;  // "left right" -> rank

  struct CacheShard {
    std::mutex mutex;
    StringMap<std::vector<TokenId>> pieces;
  };
  static constexpr size_t kCacheShards = 64;
  static constexpr size_t kCacheEntriesPerShard = 1 << 12;  // at most 256K cached pieces
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace kvb
