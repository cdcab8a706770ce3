// Byte-level BPE pre-tokenisation: the text is cut into pieces by a family's list of regexes,
// applied one after another to every piece of the previous stage (llama.cpp's
// unicode_regex_split). Text between two matches is kept as a piece of its own. The regexes are
// compiled with PCRE2 in UTF + UCP mode so that \s, \p{L}, \p{N} follow Unicode properties.
// Regex lists per family: docs/engine.md §2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvb {

struct PreTokenizerSpec {
  std::string family;                // "gpt2", "starcoder", "llama3", "qwen2", "default"
  std::vector<std::string> regexes;  // applied in order
  bool ignore_merges = false;  // Llama-3: a piece that is a whole vocab entry is emitted as is
};

// The spec of a `tokenizer.ggml.pre` name; throws FormatError naming the name when unsupported.
PreTokenizerSpec pre_tokenizer_spec(std::string_view pre_name);

class RegexPreTokenizer {
 public:
  explicit RegexPreTokenizer(const std::vector<std::string>& regexes);
  ~RegexPreTokenizer();
  RegexPreTokenizer(const RegexPreTokenizer&) = delete;
  RegexPreTokenizer& operator=(const RegexPreTokenizer&) = delete;

  // Appends the pieces of `text` (views into it) to `pieces`. Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> stages_;
};

}  // namespace kvb
