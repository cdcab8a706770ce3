// Middle truncation of a prompt to a token budget, as LongBench's pred.py and InfiniteBench's eval
// scripts do it: tokenize the whole prompt (with the model's default BOS), and when it is longer
// than the limit keep a head and a tail of tokens, decode each with skip_special_tokens and join
// the two strings (the caller re-tokenizes the result).
#pragma once

#include <string>

#include "engine/tokenizer.h"

namespace kvb {

enum class TailRounding {
  kSameAsHead,  // LongBench: int(max/2) tokens from each end
  kPythonFloor  // InfiniteBench: tokens[:max//2] + tokens[-max//2:] (the tail gets the odd token)
};

// Returns `prompt` unchanged when it fits. `max_tokens` must be positive.
std::string truncate_middle(const Tokenizer& tokenizer, const std::string& prompt, int max_tokens,
                            TailRounding rounding = TailRounding::kSameAsHead);

// After truncating context_part + question_part as a whole, splits the result again: the question
// stays apart when the truncated text still ends with it, else everything becomes context.
void split_truncated_prompt(const std::string& truncated, std::string& context_part,
                            std::string& question_part);

}  // namespace kvb
