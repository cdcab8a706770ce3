// libFuzzer target for the tokenizers (engine/tokenizer_bpe.cc, engine/tokenizer_spm.cc,
// engine/pretokenizer.cc) on arbitrary bytes. Byte 0 picks the tokenizer (the default model's
// byte-level BPE, and llama.cpp's vocab GGUFs that setup.sh puts in data/tokenizers: SentencePiece
// and BPE families) and whether special-token strings are parsed; the rest is the text.
// Properties: encode never fails or crashes, every id is in the vocabulary, and on valid UTF-8
// decode(encode(s)) == s, less the characters the vocabulary cannot spell (each checked alone),
// which tests/engine/tokenizer_test.cc holds each of these tokenizers to (SentencePiece with
// special tokens parsed excepted).
// Seeds: make_fuzz_seeds.cc (llama.cpp's tokenizer test strings, essay text, chat markup).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tests/fuzz/fuzz_util.h"

namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A vocabulary may lack a token for some bytes (SmolLM2 has none for 0x04, 0x06, 0x13, 0x14, 0x16,
// 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF); such a byte is dropped, as llama.cpp and HF
// tokenizers do (engine/tokenizer_bpe.cc). So the promise is per character: the text comes back
// as the concatenation of what each of its characters gives back alone, which is the character
// itself wherever the vocabulary spells it.
struct Loaded {
  std::string name;
  std::unique_ptr<kvb::Tokenizer> tokenizer;
  mutable std::unordered_map<std::string, std::string> alone;  // character -> decode(encode(c))

  std::string expected(std::string_view text) const {  // text: valid UTF-8
    std::string out;
    for (size_t i = 0; i < text.size();) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      const std::string ch(text.substr(i, n));
      auto it = alone.find(ch);
      if (it == alone.end()) it = alone.emplace(ch, tokenizer->decode(tokenizer->encode(ch))).first;
      out += it->second;
      i += n;
    }
    return out;
  }
};

const std::vector<Loaded>& tokenizers() {
  static const std::vector<Loaded> all = [] {
    std::vector<Loaded> out;
    const auto model = kvb::test::default_model_path();
    if (std::filesystem::exists(model))
      out.push_back({model.filename().string(), kvb::tokenizer_from_path(model.string()), {}});
    for (const char* vocab : {"llama-spm", "gpt-2", "starcoder", "phi-3", "llama-bpe", "qwen2"}) {
      const auto path = kvb::test::fixture(std::string("tokenizers/ggml-vocab-") + vocab + ".gguf");
      if (std::filesystem::exists(path))
        out.push_back({vocab, kvb::tokenizer_from_path(path.string()), {}});
    }
    if (out.empty()) {
      std::fprintf(
          stderr,
          "SKIP: no tokenizer: %s and data/tokenizers are missing (run harness/scripts/setup.sh)\n",
          model.c_str());
      std::exit(77);
    }
    return out;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Loaded& loaded = tokenizers()[(data[0] >> 1) % tokenizers().size()];
  const bool parse_special = data[0] & 1;
  const std::string text(kvb::fuzz::as_text(data + 1, size - 1));
  const kvb::Tokenizer& tok = *loaded.tokenizer;
  const std::vector<kvb::TokenId> ids = tok.encode(text, /*add_bos=*/false, parse_special);
  for (kvb::TokenId id : ids)
    if (id < 0 || id >= tok.vocab_size())
      kvb::fuzz::violated(loaded.name + ": id " + std::to_string(id) + " outside the vocabulary");
  const std::string decoded = tok.decode(ids);
  // SentencePiece with special tokens parsed prefixes the text after each special token with a
  // space, as llama.cpp does (engine/tokenizer_spm.cc): no round trip is promised there.
  const bool promised = !parse_special || tok.kind().rfind("bpe", 0) == 0;
  if (promised && valid_utf8(text) && decoded != loaded.expected(text))
    kvb::fuzz::violated(loaded.name + (parse_special ? " (parse_special)" : "") +
                        ": decode(encode(s)) is not what s's characters give alone, for s = " +
                        quoted(text) + ", got " + quoted(decoded));
  (void)tok.decode(ids, /*skip_special=*/true);
  return 0;
}
