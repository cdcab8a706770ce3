#include "engine/tokenizer_bpe.h"

#include <algorithm>
#include <queue>

#include "common/errors.h"

namespace kvb {
namespace {

std::string utf8_of(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Decodes the code point at text[pos] (advancing pos); invalid sequences yield one byte as is.
char32_t next_code_point(std::string_view text, size_t* pos) {
  const auto lead = static_cast<unsigned char>(text[*pos]);
  const size_t length = utf8_sequence_length(lead);
  if (length == 1 || *pos + length > text.size()) {
    ++*pos;
    return lead;
  }
  char32_t cp = lead & (0xFF >> (length + 1));
  for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (text[*pos + i] & 0x3F);
  *pos += length;
  return cp;
}

// One symbol of a piece during merging: a span of the byte-mapped text in a linked list.
struct Symbol {
  int start;
  int length;  // 0 once merged into its left neighbour
  int prev;
  int next;
};

struct Bigram {
  int rank;
  int left;
  int right;
  int length;  // combined length when queued, to detect stale entries
};

// The queue pops the lowest rank first and, among equal ranks, the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

ByteToUnicode::ByteToUnicode() {
  code_point_to_byte_.fill(-1);
  int next_extra = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable =
        (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
    const int cp = printable ? byte : next_extra++;
    byte_to_text_[byte] = utf8_of(static_cast<char32_t>(cp));
    code_point_to_byte_[cp] = static_cast<int16_t>(byte);
  }
}

int ByteToUnicode::decode(char32_t code_point) const {
  return code_point < code_point_to_byte_.size() ? code_point_to_byte_[code_point] : -1;
}

BpeTokenizer::BpeTokenizer(Vocabulary vocab)
    : VocabTokenizer(std::move(vocab)),
      spec_(pre_tokenizer_spec(vocab_.pre)),
      pre_tokenizer_(spec_.regexes),
      specials_(vocab_) {
  token_ids_.reserve(vocab_.tokens.size());
  for (TokenId id = 0; id < static_cast<TokenId>(vocab_.tokens.size()); ++id)
    token_ids_.emplace(vocab_.tokens[id], id);  // the first id of a duplicated text wins
  merge_ranks_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string& merge = vocab_.merges[rank];
    if (merge.find(' ', 1) == std::string::npos)
      throw FormatError(vocab_.source + ": tokenizer.ggml.merges[" + std::to_string(rank) +
                        "] = '" + merge + "' is not two symbols separated by a space");
    merge_ranks_.emplace(merge, static_cast<int>(rank));
  }
}

BpeTokenizer::~BpeTokenizer() = default;

int BpeTokenizer::merge_rank(std::string_view left, std::string_view right,
                             std::string* key) const {
  key->assign(left);
  key->push_back(' ');
  key->append(right);
  const auto it = merge_ranks_.find(std::string_view(*key));
  return it == merge_ranks_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<TokenId>* out) const {
  std::string mapped;
  mapped.reserve(piece.size() * 2);
  for (char byte : piece) mapped += bytes_.encode(static_cast<unsigned char>(byte));

  if (spec_.ignore_merges) {
    const auto it = token_ids_.find(std::string_view(mapped));
    if (it != token_ids_.end()) {
      out->push_back(it->second);
      return;
    }
  }

  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < mapped.size();) {
    const size_t start = pos;
    pos += std::min(utf8_sequence_length(static_cast<unsigned char>(mapped[pos])),
                    mapped.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(
        {static_cast<int>(start), static_cast<int>(pos - start), index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto text_of = [&](const Symbol& symbol) {
    return std::string_view(mapped).substr(symbol.start, symbol.length);
  };
  std::string key;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int rank = merge_rank(text_of(symbols[left]), text_of(symbols[right]), &key);
    if (rank >= 0) queue.push({rank, left, right, symbols[left].length + symbols[right].length});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) try_add(i, i + 1);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side was merged away, or has grown since the pair was queued.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length)
      continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view text = text_of(symbols[i]);
    const auto it = token_ids_.find(text);
    if (it != token_ids_.end()) {
      out->push_back(it->second);
      continue;
    }
    // A merge result missing from the vocabulary: fall back to its single code points. A byte
    // the vocabulary cannot spell (SmolLM2 has no 0xFE/0xFF, which never occur in UTF-8) is
    // dropped, as llama.cpp and HF tokenizers (BPE without unk_token) do.
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      pos +=
          std::min(utf8_sequence_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
      const auto single = token_ids_.find(text.substr(start, pos - start));
      if (single != token_ids_.end()) out->push_back(single->second);
    }
  }
}

void BpeTokenizer::encode_piece_cached(std::string_view piece, std::vector<TokenId>* out) const {
  CacheShard& shard = cache_[StringHash{}(piece) % kCacheShards];
  {
    std::lock_guard lock(shard.mutex);
    const auto it = shard.pieces.find(piece);
    if (it != shard.pieces.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  encode_piece(piece, out);
  // Long pieces (runs of spaces, CJK text without spaces) rarely repeat; keep the cache to words.
  if (piece.size() > 64) return;
  std::lock_guard lock(shard.mutex);
  if (shard.pieces.size() < kCacheEntriesPerShard)
    shard.pieces.emplace(std::string(piece),
                         std::vector<TokenId>(out->begin() + first, out->end()));
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, bool add_bos,
                                          bool parse_special) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
  std::vector<TextFragment> fragments;
  specials_.split(text, parse_special, &fragments);
  std::vector<std::string_view> pieces;
  for (const TextFragment& fragment : fragments) {
    if (fragment.token >= 0) {
      ids.push_back(fragment.token);
      continue;
    }
    pieces.clear();
    pre_tokenizer_.split(fragment.text, &pieces);
    for (std::string_view piece : pieces) encode_piece_cached(piece, &ids);
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string out;
  for (TokenId id : ids) {
    check_id(id);
    const std::string& text = vocab_.tokens[id];
    const TokenType type = vocab_.type_of(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown) {
      if (!skip_special) out += text;
      continue;
    }
    if (type == TokenType::kUserDefined) {  // stored as plain text, not byte-mapped
      out += text;
      continue;
    }
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      const int byte = bytes_.decode(next_code_point(text, &pos));
      if (byte >= 0)
        out += static_cast<char>(byte);
      else
        out.append(text, start, pos - start);  // outside the byte map: keep its UTF-8
    }
  }
  return out;
}

}  // namespace kvb
