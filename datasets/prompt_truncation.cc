#include "datasets/prompt_truncation.h"

#include "common/errors.h"

namespace kvb {

std::string truncate_middle(const Tokenizer& tokenizer, const std::string& prompt, int max_tokens,
                            TailRounding rounding) {
  if (max_tokens <= 0)
    throw InputError("prompt truncation needs a positive token limit, got " +
                     std::to_string(max_tokens));
  const std::vector<TokenId> ids = tokenizer.encode(prompt, tokenizer.adds_bos_by_default());
  if (static_cast<int>(ids.size()) <= max_tokens) return prompt;
  const size_t head = static_cast<size_t>(max_tokens / 2);
  const size_t tail = rounding == TailRounding::kSameAsHead
                          ? head
                          : static_cast<size_t>(max_tokens - max_tokens / 2);
  const std::vector<TokenId> first(ids.begin(), ids.begin() + static_cast<long>(head));
  const std::vector<TokenId> last(ids.end() - static_cast<long>(tail), ids.end());
  if (rounding == TailRounding::kSameAsHead)
    return tokenizer.decode(first, /*skip_special=*/true) +
           tokenizer.decode(last, /*skip_special=*/true);
  // InfiniteBench decodes the joined id list in one call.
  std::vector<TokenId> joined = first;
  joined.insert(joined.end(), last.begin(), last.end());
  return tokenizer.decode(joined, /*skip_special=*/true);
}

void split_truncated_prompt(const std::string& truncated, std::string& context_part,
                            std::string& question_part) {
  if (!question_part.empty() && truncated.size() >= question_part.size() &&
      truncated.compare(truncated.size() - question_part.size(), question_part.size(),
                        question_part) == 0) {
    context_part = truncated.substr(0, truncated.size() - question_part.size());
    return;
  }
  context_part = truncated;
  question_part.clear();
}

}  // namespace kvb
