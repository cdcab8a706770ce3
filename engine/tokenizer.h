// The tokenizer interface shared by the engine, the datasets (length fitting) and the CLI.
// Implementations: byte-level BPE with a family pre-tokenizer (gpt-2, starcoder/smollm, llama-3,
// qwen2) and SentencePiece (through libsentencepiece).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvb {

using TokenId = int32_t;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`. No BOS unless add_bos. With parse_special, special-token strings in the
  // text (e.g. "<|im_start|>") map to their ids; without it they are ordinary text.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_bos = false,
                                      bool parse_special = false) const = 0;
  // Text of the ids, special tokens rendered as their strings unless skip_special.
  virtual std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const = 0;
  virtual std::string token_text(TokenId id) const = 0;

  virtual int vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;  // -1 when the model has none
  virtual TokenId eos_id() const = 0;
  // End-of-generation: EOS and chat end tokens such as <|im_end|>, <|eot_id|>.
  virtual bool is_end_of_generation(TokenId id) const = 0;
  // Whether the model's own convention prepends BOS to a prompt.
  virtual bool adds_bos_by_default() const = 0;
  virtual std::string kind() const = 0;  // "bpe:smollm", "bpe:llama3", "spm", ...
};

}  // namespace kvb

namespace kvb {
class GgufFile;
// Factories (engine/tokenizer_*.cc). Throw FormatError naming the file and field on bad input.
std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& gguf);
// An HF folder: tokenizer.json (byte-level BPE) or tokenizer.model (SentencePiece).
std::unique_ptr<Tokenizer> tokenizer_from_hf_folder(const std::string& folder);
// A .gguf file (only its tokenizer metadata is read) or an HF folder; what `kvbench tokenize` uses.
std::unique_ptr<Tokenizer> tokenizer_from_path(const std::string& path);
}  // namespace kvb
