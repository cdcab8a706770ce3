#include "engine/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>

#include "common/errors.h"

namespace kvb {
namespace {

// The GPT-2 regex as llama.cpp writes it (without the trailing `|\s+` of the HF string: a lone
// whitespace before a non-space that no branch takes becomes a piece of its own either way).
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama-3's tokenizer.json regex with `(?i:...)` spelled out as case classes (llama.cpp PR #6920).
constexpr const char* kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: the Llama-3 regex with single digits.
constexpr const char* kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Family {
  const char* family;
  std::vector<std::string_view> names;  // tokenizer.ggml.pre values of this family
};

const std::array<Family, 5>& families() {
  static const std::array<Family, 5> kFamilies = {{
      {"llama3", {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}},
      {"qwen2", {"qwen2", "deepseek-r1-qwen", "megrez"}},
      {"gpt2", {"gpt-2", "gpt2", "phi-2", "mpt", "olmo"}},
      {"starcoder", {"starcoder", "smollm", "refact", "command-r"}},
      {"default", {"default"}},
  }};
  return kFamilies;
}

}  // namespace

PreTokenizerSpec pre_tokenizer_spec(std::string_view pre_name) {
  for (const Family& family : families()) {
    if (std::find(family.names.begin(), family.names.end(), pre_name) == family.names.end())
      continue;
    const std::string name = family.family;
    if (name == "llama3") return {name, {kLlama3Regex}, true};
    if (name == "qwen2") return {name, {kQwen2Regex}, false};
    if (name == "gpt2") return {name, {kGpt2Regex}, false};
    if (name == "starcoder") return {name, {R"(\p{N})", kGpt2Regex}, false};
    return {
        name, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Regex, R"(\p{N}+)", R"([0-9][0-9][0-9])"}, false};
  }
  std::string supported;
  for (const Family& family : families())
    for (std::string_view name : family.names)
      supported += (supported.empty() ? "" : ", ") + std::string(name);
  throw FormatError("unsupported byte-level BPE pre-tokenizer '" + std::string(pre_name) +
                    "' (tokenizer.ggml.pre); supported: " + supported);
}

struct RegexPreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexPreTokenizer::RegexPreTokenizer(const std::vector<std::string>& regexes) {
  for (const std::string& regex : regexes) {
    auto stage = std::make_unique<Compiled>();
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    stage->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                &error_offset, nullptr);
    if (stage->code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      throw FormatError("pre-tokenizer regex '" + regex + "' does not compile at offset " +
                        std::to_string(error_offset) + ": " +
                        reinterpret_cast<const char*>(message.data()));
    }
    // JIT is an optimisation only: matching falls back to the interpreter when it is absent.
    pcre2_jit_compile(stage->code, PCRE2_JIT_COMPLETE);
    stages_.push_back(std::move(stage));
  }
}

RegexPreTokenizer::~RegexPreTokenizer() = default;

namespace {

// Appends the matches of `code` in `text` and the text between them to `out`.
void split_one(const pcre2_code* code, pcre2_match_data* match, std::string_view text,
               std::vector<std::string_view>* out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  size_t last_end = 0;
  while (offset < text.size()) {
    int rc = pcre2_match(code, subject, text.size(), offset, 0, match, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_JIT, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      throw InputError(std::string("pre-tokenizer regex failed on the input text: ") +
                       reinterpret_cast<const char*>(message.data()));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t start = ovector[0];
    size_t end = ovector[1];
    if (end == start) {
      // None of our regexes matches the empty string; guard against a stall all the same.
      end = std::min(text.size(), start + 1);
      offset = end;
      continue;
    }
    if (start > last_end) out->push_back(text.substr(last_end, start - last_end));
    out->push_back(text.substr(start, end - start));
    last_end = end;
    offset = end;
  }
  if (last_end < text.size()) out->push_back(text.substr(last_end));
}

}  // namespace

void RegexPreTokenizer::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const auto& stage : stages_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(stage->code, nullptr);
    if (match == nullptr) throw CapacityError("out of memory creating PCRE2 match data");
    try {
      next.clear();
      for (std::string_view piece : current) split_one(stage->code, match, piece, &next);
    } catch (...) {
      pcre2_match_data_free(match);
      throw;
    }
    pcre2_match_data_free(match);
    current.swap(next);
  }
  pieces->insert(pieces->end(), current.begin(), current.end());
}

}  // namespace kvb
