#include "engine/tokenizer_vocab.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/errors.h"

namespace kvb {

void Vocabulary::validate() const {
  const auto n = static_cast<TokenId>(tokens.size());
  if (n == 0) throw FormatError(source + ": the tokenizer vocabulary is empty");
  if (!types.empty() && types.size() != tokens.size())
    throw FormatError(source + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                      " entries but tokenizer.ggml.tokens has " + std::to_string(tokens.size()));
  if (!scores.empty() && scores.size() != tokens.size())
    throw FormatError(source + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                      " entries but tokenizer.ggml.tokens has " + std::to_string(tokens.size()));
  for (const auto& [name, id] : {std::pair{"bos", bos}, {"eos", eos}, {"unknown", unk}}) {
    if (id < -1 || id >= n)
      throw FormatError(source + ": tokenizer.ggml." + name + "_token_id " + std::to_string(id) +
                        " is outside the vocabulary of " + std::to_string(n) + " tokens");
  }
  for (TokenId id : end_of_generation) {
    if (id < 0 || id >= n)
      throw FormatError(source + ": end-of-generation token id " + std::to_string(id) +
                        " is outside the vocabulary");
  }
}

void Vocabulary::add_known_end_tokens() {
  // The chat end markers of the supported families (the same list llama.cpp scans for).
  static constexpr std::string_view kEndTexts[] = {
      "<|eot_id|>",    "<|eom_id|>",    "<|im_end|>",      "<|end|>",
      "<|endoftext|>", "<end_of_turn>", "<|end_of_text|>", "<EOT>",
  };
  if (eos >= 0 &&
      std::find(end_of_generation.begin(), end_of_generation.end(), eos) == end_of_generation.end())
    end_of_generation.push_back(eos);
  for (TokenId id = 0; id < static_cast<TokenId>(tokens.size()); ++id) {
    const TokenType type = type_of(id);
    if (type != TokenType::kControl && type != TokenType::kUserDefined) continue;
    for (std::string_view text : kEndTexts) {
      if (tokens[id] == text && std::find(end_of_generation.begin(), end_of_generation.end(), id) ==
                                    end_of_generation.end())
        end_of_generation.push_back(id);
    }
  }
}

SpecialTokenSplitter::SpecialTokenSplitter(const Vocabulary& vocab) {
  for (TokenId id = 0; id < static_cast<TokenId>(vocab.tokens.size()); ++id) {
    const TokenType type = vocab.type_of(id);
    const bool user_defined = type == TokenType::kUserDefined;
    if (!user_defined && type != TokenType::kControl && type != TokenType::kUnknown) continue;
    const std::string& text = vocab.tokens[id];
    if (text.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(text[0])].push_back({text, id, user_defined});
  }
  for (auto& candidates : by_first_byte_) {
    // Longest first, so that "<|im_start|>" wins over a shorter token that is its prefix.
    std::stable_sort(
        candidates.begin(), candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.text.size() > b.text.size(); });
  }
}

void SpecialTokenSplitter::split(std::string_view text, bool parse_special,
                                 std::vector<TextFragment>* out) const {
  size_t raw_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[pos])];
    const Candidate* match = nullptr;
    for (const Candidate& candidate : candidates) {
      if (!parse_special && !candidate.always) continue;
      if (text.compare(pos, candidate.text.size(), candidate.text) == 0) {
        match = &candidate;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (pos > raw_start) out->push_back({text.substr(raw_start, pos - raw_start), -1});
    out->push_back({{}, match->id});
    pos += match->text.size();
    raw_start = pos;
  }
  if (raw_start < text.size()) out->push_back({text.substr(raw_start), -1});
}

VocabTokenizer::VocabTokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) { vocab_.validate(); }

void VocabTokenizer::check_id(TokenId id) const {
  if (id < 0 || id >= vocab_size())
    throw InputError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                     std::to_string(vocab_size()) + " tokens (" + vocab_.source + ")");
}

std::string VocabTokenizer::token_text(TokenId id) const {
  check_id(id);
  return vocab_.tokens[id];
}

bool VocabTokenizer::is_end_of_generation(TokenId id) const {
  return std::find(vocab_.end_of_generation.begin(), vocab_.end_of_generation.end(), id) !=
         vocab_.end_of_generation.end();
}

}  // namespace kvb
