// SentencePiece (Llama-2, Mistral, Phi-3) through libsentencepiece.
//
// libsentencepiece-dev ships only sentencepiece_processor.h (no sentencepiece_model.pb.h, no
// protobuf headers), so the model is exchanged with the library as serialized ModelProto bytes:
// - from a tokenizer.model file: its bytes as they are;
// - from a GGUF vocabulary (tokenizer.ggml.tokens/scores/token_type): a ModelProto written here
//   with the protobuf wire format (BPE model, byte fallback, identity normalizer).
// In both cases a NormalizerSpec{add_dummy_prefix: false} is appended (protobuf merges repeated
// sub-messages), because the space prefix is applied here the way llama.cpp does it: before the
// text and after every special token, not once per call. Special tokens are cut out before
// SentencePiece sees the text (user-defined always, control with parse_special), as in llama.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"
#include "engine/tokenizer_vocab.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace kvb {

// Serialized ModelProto for a GGUF SentencePiece vocabulary ("llama" tokenizer model).
std::string spm_model_proto_from_vocab(const Vocabulary& vocab);
// The vocabulary of a serialized ModelProto (pieces, types, scores, special ids, dummy prefix).
// Bounds-checked: throws FormatError naming `source` on malformed bytes.
Vocabulary spm_vocab_from_model_proto(std::string_view serialized, const std::string& source);

class SpmTokenizer : public VocabTokenizer {
 public:
  // `serialized_model` is a ModelProto whose pieces are `vocab.tokens` in order.
  SpmTokenizer(Vocabulary vocab, std::string serialized_model);
  ~SpmTokenizer() override;

  std::vector<TokenId> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = false) const override;
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const override;
  std::string kind() const override { return "spm"; }

 private:
  SpecialTokenSplitter specials_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

// A tokenizer.model file as an SpmTokenizer. BOS is added by default (Llama/Mistral convention)
// unless `add_bos` (tokenizer_config.json's add_bos_token) says otherwise.
std::unique_ptr<SpmTokenizer> spm_tokenizer_from_model_file(const std::string& path,
                                                            std::optional<bool> add_bos = {});

}  // namespace kvb
