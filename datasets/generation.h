// What every benchmark generator shares: the chat frame around the user message, the token
// counter used for length fitting, and the request (task, length, count, seed, data folders).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine/tokenizer.h"

namespace kvb {

// The model's chat template rendered around one user message, split at the message: `prefix` is
// everything before it (BOS text, system block, user header), `suffix` everything after it up to
// and including the assistant header (add_generation_prompt). Empty for RULER's `base` template.
struct ChatFrame {
  std::string prefix;
  std::string suffix;

  std::string wrap(std::string_view user_message) const {
    return prefix + std::string(user_message) + suffix;
  }
  bool empty() const { return prefix.empty() && suffix.empty(); }
};

// Token counts as RULER takes them: the model tokenizer on raw text, special-token strings parsed
// (HF `tokenizer.tokenize`), no BOS added.
class TokenCounter {
 public:
  explicit TokenCounter(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Exact count: one tokenizer pass over the text.
  int exact(std::string_view text) const;

  // The same count, computed piecewise: the text is cut just before each " <letter or digit>" that
  // follows a non-space character, and the counts of the pieces (memoised) are summed. For
  // byte-level BPE with GPT-2/Llama-3/SmolLM-style pre-tokenizers such a cut is a pre-token
  // boundary, so the sum is exact; for SentencePiece it is a close estimate. Used inside the size
  // searches so that fitting a 128K prompt does not re-tokenise 128K tokens per probe; every
  // emitted sample is checked with exact().
  int fast(std::string_view text);

 private:
  const Tokenizer& tokenizer_;
  std::unordered_map<std::string, int> memo_;
};

// Progress lines for stderr: (samples done, samples total).
using ProgressFn = std::function<void(int done, int total)>;

struct GenerationRequest {
  std::string task;
  int length = 4096;  // max_seq_length: prompt tokens + tokens to generate
  int num_samples = 1;
  uint64_t seed = 42;
  std::filesystem::path data_dir;  // essays, word lists, QA files (see each generator)
};

}  // namespace kvb
