#include "engine/tokenizer_spm.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "common/errors.h"

namespace kvb {
namespace {

// Field numbers of sentencepiece_model.proto (proto2) used here.
constexpr int kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3;
constexpr int kPieceText = 1, kPieceScore = 2, kPieceType = 3;
constexpr int kTrainerModelType = 3, kTrainerByteFallback = 35, kTrainerUnkId = 40,
              kTrainerBosId = 41, kTrainerEosId = 42;
constexpr int kNormalizerName = 1, kNormalizerAddDummyPrefix = 3,
              kNormalizerRemoveExtraWhitespaces = 4, kNormalizerEscapeWhitespaces = 5;
constexpr int kModelTypeBpe = 2;
constexpr int kWireVarint = 0, kWireFixed64 = 1, kWireLength = 2, kWireFixed32 = 5;

// ---- protobuf wire format: writing ----

void put_varint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}
void put_tag(std::string* out, int field, int wire) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire);
}
void put_varint_field(std::string* out, int field, int64_t value) {
  put_tag(out, field, kWireVarint);
  put_varint(out, static_cast<uint64_t>(value));  // negative int32: ten bytes, as protobuf does
}
void put_bytes_field(std::string* out, int field, std::string_view bytes) {
  put_tag(out, field, kWireLength);
  put_varint(out, bytes.size());
  out->append(bytes);
}
void put_float_field(std::string* out, int field, float value) {
  put_tag(out, field, kWireFixed32);
  char bytes[4];
  std::memcpy(bytes, &value, 4);  // little-endian hosts only (x86-64, aarch64)
  out->append(bytes, 4);
}

// ---- protobuf wire format: reading (bounds-checked) ----

class WireReader {
 public:
  WireReader(std::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {}
  bool done() const { return pos_ >= bytes_.size(); }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) fail("truncated varint");
      const auto byte = static_cast<unsigned char>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("varint longer than 10 bytes");
  }
  std::string_view length_delimited() {
    const uint64_t length = varint();
    if (length > bytes_.size() - pos_) fail("length-delimited field runs past the end");
    const std::string_view out = bytes_.substr(pos_, length);
    pos_ += length;
    return out;
  }
  float fixed32_float() {
    if (bytes_.size() - pos_ < 4) fail("truncated fixed32 field");
    float value;
    std::memcpy(&value, bytes_.data() + pos_, 4);
    pos_ += 4;
    return value;
  }
  void skip(int wire) {
    switch (wire) {
      case kWireVarint:
        varint();
        return;
      case kWireFixed64:
        if (bytes_.size() - pos_ < 8) fail("truncated fixed64 field");
        pos_ += 8;
        return;
      case kWireLength:
        length_delimited();
        return;
      case kWireFixed32:
        if (bytes_.size() - pos_ < 4) fail("truncated fixed32 field");
        pos_ += 4;
        return;
      default:
        fail("unsupported wire type " + std::to_string(wire));
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(source_ + ": not a valid SentencePiece model (" + what + " at byte " +
                      std::to_string(pos_) + ")");
  }

 private:
  std::string_view bytes_;
  const std::string& source_;
  size_t pos_ = 0;
};

// SentencePiece piece type for a GGUF token: one UNKNOWN piece (the unk id); other "unknown"
// tokens (Phi-3's [PADxxxxx]) become CONTROL, which SentencePiece never emits for text.
TokenType piece_type_for(const Vocabulary& vocab, TokenId id, bool byte_fallback) {
  if (id == vocab.unk) return TokenType::kUnknown;
  switch (vocab.type_of(id)) {
    case TokenType::kUnknown:
      return TokenType::kControl;
    case TokenType::kUndefined:
      return TokenType::kNormal;
    case TokenType::kByte:
      return byte_fallback ? TokenType::kByte : TokenType::kUnused;
    default:
      return vocab.type_of(id);
  }
}

}  // namespace

std::string spm_model_proto_from_vocab(const Vocabulary& vocab) {
  if (vocab.unk < 0)
    throw FormatError(vocab.source +
                      ": a SentencePiece vocabulary needs an unknown token "
                      "(tokenizer.ggml.unknown_token_id or a token of type UNKNOWN)");
  int byte_pieces = 0;
  for (TokenId id = 0; id < static_cast<TokenId>(vocab.tokens.size()); ++id)
    byte_pieces += vocab.type_of(id) == TokenType::kByte;
  const bool byte_fallback = byte_pieces == 256;
  std::string proto;
  std::set<std::string_view> seen;
  for (TokenId id = 0; id < static_cast<TokenId>(vocab.tokens.size()); ++id) {
    std::string text = vocab.tokens[id];
    TokenType type = piece_type_for(vocab, id, byte_fallback);
    // SentencePiece rejects empty and repeated pieces; such ids can never come out of the text
    // anyway, so they keep their slot under a name no text can produce.
    if (text.empty() || !seen.insert(vocab.tokens[id]).second) {
      text = "<kvb_unreachable_" + std::to_string(id) + ">";
      type = TokenType::kUnused;
    }
    std::string piece;
    put_bytes_field(&piece, kPieceText, text);
    put_float_field(&piece, kPieceScore, vocab.scores.empty() ? 0.0f : vocab.scores[id]);
    put_varint_field(&piece, kPieceType, static_cast<int>(type));
    put_bytes_field(&proto, kModelPieces, piece);
  }
  std::string trainer;
  put_varint_field(&trainer, kTrainerModelType, kModelTypeBpe);
  put_varint_field(&trainer, kTrainerByteFallback, byte_fallback ? 1 : 0);
  put_varint_field(&trainer, kTrainerUnkId, vocab.unk);
  put_varint_field(&trainer, kTrainerBosId, vocab.bos);
  put_varint_field(&trainer, kTrainerEosId, vocab.eos);
  put_bytes_field(&proto, kModelTrainerSpec, trainer);
  std::string normalizer;
  put_bytes_field(&normalizer, kNormalizerName, "identity");
  put_varint_field(&normalizer, kNormalizerAddDummyPrefix, 0);
  put_varint_field(&normalizer, kNormalizerRemoveExtraWhitespaces, 0);
  put_varint_field(&normalizer, kNormalizerEscapeWhitespaces, 1);
  put_bytes_field(&proto, kModelNormalizerSpec, normalizer);
  return proto;
}

Vocabulary spm_vocab_from_model_proto(std::string_view serialized, const std::string& source) {
  Vocabulary vocab;
  vocab.source = source;
  int64_t unk = 0, bos = 1, eos = 2;  // proto2 defaults of TrainerSpec
  bool add_dummy_prefix = true;       // proto2 default of NormalizerSpec
  WireReader model(serialized, source);
  while (!model.done()) {
    const uint64_t tag = model.varint();
    const int field = static_cast<int>(tag >> 3), wire = static_cast<int>(tag & 7);
    if (wire != kWireLength ||
        (field != kModelPieces && field != kModelTrainerSpec && field != kModelNormalizerSpec)) {
      model.skip(wire);
      continue;
    }
    WireReader message(model.length_delimited(), source);
    std::string text;
    float score = 0.0f;
    int64_t type = static_cast<int64_t>(TokenType::kNormal);
    while (!message.done()) {
      const uint64_t inner = message.varint();
      const int f = static_cast<int>(inner >> 3), w = static_cast<int>(inner & 7);
      if (field == kModelPieces && f == kPieceText && w == kWireLength) {
        text = std::string(message.length_delimited());
      } else if (field == kModelPieces && f == kPieceScore && w == kWireFixed32) {
        score = message.fixed32_float();
      } else if (field == kModelPieces && f == kPieceType && w == kWireVarint) {
        type = static_cast<int64_t>(message.varint());
      } else if (field == kModelTrainerSpec && w == kWireVarint &&
                 (f == kTrainerUnkId || f == kTrainerBosId || f == kTrainerEosId)) {
        const auto value = static_cast<int32_t>(message.varint());
        (f == kTrainerUnkId ? unk : f == kTrainerBosId ? bos : eos) = value;
      } else if (field == kModelNormalizerSpec && f == kNormalizerAddDummyPrefix &&
                 w == kWireVarint) {
        add_dummy_prefix = message.varint() != 0;
      } else {
        message.skip(w);
      }
    }
    if (field != kModelPieces) continue;
    if (type < 1 || type > 6) message.fail("piece type " + std::to_string(type));
    vocab.tokens.push_back(std::move(text));
    vocab.scores.push_back(score);
    vocab.types.push_back(static_cast<TokenType>(type));
  }
  const auto n = static_cast<int64_t>(vocab.tokens.size());
  auto id_or_none = [n](int64_t id) { return id >= 0 && id < n ? static_cast<TokenId>(id) : -1; };
  vocab.unk = id_or_none(unk);
  vocab.bos = id_or_none(bos);
  vocab.eos = id_or_none(eos);
  vocab.add_space_prefix = add_dummy_prefix;
  vocab.add_bos = vocab.bos >= 0;
  vocab.add_known_end_tokens();
  return vocab;
}

SpmTokenizer::SpmTokenizer(Vocabulary vocab, std::string serialized_model)
    : VocabTokenizer(std::move(vocab)),
      specials_(vocab_),
      processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  // The space prefix is ours (see the header); a second NormalizerSpec merges into the first.
  std::string no_dummy_prefix;
  put_varint_field(&no_dummy_prefix, kNormalizerAddDummyPrefix, 0);
  put_bytes_field(&serialized_model, kModelNormalizerSpec, no_dummy_prefix);
  const auto status = processor_->LoadFromSerializedProto(serialized_model);
  if (!status.ok())
    throw FormatError(vocab_.source +
                      ": libsentencepiece rejected the model: " + status.ToString());
  if (processor_->GetPieceSize() != vocab_size())
    throw FormatError(vocab_.source + ": SentencePiece model has " +
                      std::to_string(processor_->GetPieceSize()) + " pieces, vocabulary has " +
                      std::to_string(vocab_size()));
}

SpmTokenizer::~SpmTokenizer() = default;

std::vector<TokenId> SpmTokenizer::encode(std::string_view text, bool add_bos,
                                          bool parse_special) const {
  std::vector<TokenId> ids;
  if (add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
  std::vector<TextFragment> fragments;
  specials_.split(text, parse_special, &fragments);
  bool after_special = true;  // the start of the text counts as "after a special token"
  std::string buffer;
  std::vector<int> piece_ids;
  for (const TextFragment& fragment : fragments) {
    if (fragment.token >= 0) {
      ids.push_back(fragment.token);
      after_special = true;
      continue;
    }
    buffer.clear();
    if (vocab_.add_space_prefix && after_special) buffer.push_back(' ');
    buffer.append(fragment.text);
    after_special = false;
    piece_ids.clear();
    const auto status = processor_->Encode(buffer, &piece_ids);
    if (!status.ok())
      throw InputError("SentencePiece could not encode the text: " + status.ToString());
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

namespace {

// "<0x41>" -> 0x41; -1 when `text` is not a byte token's text.
int byte_token_value(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9')
      value |= c - '0';
    else if (c >= 'A' && c <= 'F')
      value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      value |= c - 'a' + 10;
    else
      return -1;
  }
  return value;
}

}  // namespace

std::string SpmTokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 '▁'
  std::string out;
  bool strip_space = vocab_.add_space_prefix;  // undo the prefix encode() put at the start
  for (TokenId id : ids) {
    check_id(id);
    const std::string& text = vocab_.tokens[id];
    const TokenType type = vocab_.type_of(id);
    if (vocab_.is_special(id)) {
      if (!skip_special) out += text;
      strip_space = vocab_.add_space_prefix;  // ... and after every special token
      continue;
    }
    if (type == TokenType::kByte) {
      const int byte = byte_token_value(text);
      if (byte >= 0) {
        if (!(strip_space && byte == ' ')) out.push_back(static_cast<char>(byte));
        strip_space = false;
        continue;
      }
    }
    std::string piece;
    for (size_t pos = 0; pos < text.size();) {
      if (text.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
        piece.push_back(' ');
        pos += kSpaceMark.size();
      } else {
        piece.push_back(text[pos++]);
      }
    }
    if (strip_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    // encode() splits a user-defined token's text off even without parse_special and prefixes the
    // text after it with a space, as after a special token; take that space back here too
    // (tests/fuzz/tokenizer_fuzz.cc found "\n</s>\n" coming back as "\n</s> \n" with phi-3).
    strip_space = type == TokenType::kUserDefined && vocab_.add_space_prefix;
    out += piece;
  }
  return out;
}

std::unique_ptr<SpmTokenizer> spm_tokenizer_from_model_file(const std::string& path,
                                                            std::optional<bool> add_bos) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("cannot open SentencePiece model '" + path + "'");
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  Vocabulary vocab = spm_vocab_from_model_proto(bytes, path);
  if (add_bos) vocab.add_bos = *add_bos && vocab.bos >= 0;
  return std::make_unique<SpmTokenizer>(std::move(vocab), std::move(bytes));
}

}  // namespace kvb
