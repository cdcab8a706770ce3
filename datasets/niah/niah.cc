#include "datasets/niah/niah.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/errors.h"
#include "datasets/data_paths.h"
#include "datasets/text_utils.h"

namespace kvb {
namespace fs = std::filesystem;

std::vector<double> niah_depths(int count) {
  if (count < 1) throw InputError("NIAH: the number of depths must be at least 1");
  if (count == 1) return {0.0};
  std::vector<double> depths;
  for (int i = 0; i < count; ++i) {
    const double value = i == count - 1 ? 100.0 : i * (100.0 / (count - 1));
    depths.push_back(std::nearbyint(value));  // numpy round: half to even
  }
  return depths;
}

namespace {

std::string read_essays(const fs::path& folder) {
  std::string corpus;
  for (const fs::path& file : essay_files(folder, "NIAH haystack")) corpus += read_text_file(file);
  return corpus;
}

// The first `length` tokens of the corpus read in whole passes (the corpus repeats until long
// enough). Encoding a character prefix with a safety margin gives the same leading tokens as
// encoding everything, without tokenising the whole corpus for short contexts.
std::vector<TokenId> haystack_tokens(const std::string& corpus, int length,
                                     const Tokenizer& tokenizer) {
  size_t chars = static_cast<size_t>(length) * 8 + 4096;
  while (true) {
    std::string text;
    while (text.size() < chars) text += corpus;
    const bool whole = text.size() <= chars;
    text.resize(std::min(text.size(), chars));
    std::vector<TokenId> ids = tokenizer.encode(text);
    if (static_cast<int>(ids.size()) > length + 16 || whole) {
      ids.resize(std::min<size_t>(ids.size(), length));
      return ids;
    }
    chars *= 2;
  }
}

}  // namespace

std::vector<Sample> generate_niah(const NiahRequest& request, const Tokenizer& tokenizer,
                                  const ProgressFn& progress) {
  if (request.context_lengths.empty() || request.depths.empty())
    throw InputError("NIAH: give at least one context length and one depth");
  for (double depth : request.depths)
    if (depth < 0 || depth > 100)
      throw InputError("NIAH: depth " + std::to_string(depth) + " is outside 0-100");
  const std::string corpus = read_essays(request.essays_dir);
  const std::vector<TokenId> needle = tokenizer.encode(kNiahNeedle);
  const std::vector<TokenId> period_ids = tokenizer.encode(".");
  const std::set<TokenId> periods(period_ids.begin(), period_ids.end());
  const std::string head =
      request.chat_template
          ? std::string(kNiahPromptHead).substr(std::string(kNiahRawTurnMarker).size())
          : std::string(kNiahPromptHead);

  std::vector<Sample> samples;
  const int total = static_cast<int>(request.context_lengths.size() * request.depths.size());
  for (size_t li = 0; li < request.context_lengths.size(); ++li) {
    const int context_length = request.context_lengths[li];
    if (context_length <= kNiahFinalContextBuffer + static_cast<int>(needle.size()))
      throw InputError("NIAH: context length " + std::to_string(context_length) +
                       " is too small for the needle and the 200-token buffer");
    // encode_and_trim, decode, re-encode; the target leaves final_context_length_buffer.
    const std::string trimmed =
        tokenizer.decode(haystack_tokens(corpus, context_length, tokenizer));
    std::vector<TokenId> context = tokenizer.encode(trimmed);
    const size_t target = context_length - kNiahFinalContextBuffer;
    if (context.size() + needle.size() > target) context.resize(target - needle.size());

    for (size_t di = 0; di < request.depths.size(); ++di) {
      const double depth = request.depths[di];
      size_t insertion = context.size();
      if (depth < 100) {
        insertion = static_cast<size_t>(context.size() * (depth / 100.0));
        while (insertion > 0 && !periods.count(context[insertion - 1])) --insertion;
      }
      std::vector<TokenId> ids(context.begin(), context.begin() + insertion);
      ids.insert(ids.end(), needle.begin(), needle.end());
      ids.insert(ids.end(), context.begin() + insertion, context.end());

      Sample sample;
      char depth_text[32];
      std::snprintf(depth_text, sizeof depth_text, "%g", depth);
      sample.id = "niah/" + std::to_string(context_length) + "/" + depth_text;
      sample.benchmark = "niah";
      sample.task = "niah";
      sample.context_part =
          head + tokenizer.decode(ids, /*skip_special=*/true) + kNiahPromptBookEnd;
      sample.question_part =
          std::string(kNiahPromptQuestion) + kNiahRetrievalQuestion + kNiahPromptAnswer;
      sample.references = {kNiahRecallAnswer};
      sample.max_new_tokens = kNiahMaxNewTokens;
      sample.length = context_length;
      sample.depth = depth;
      sample.use_chat_template = request.chat_template;
      sample.extra = {{"context_length", context_length},
                      {"depth_percent", depth},
                      {"length_index", li},
                      {"depth_index", di},
                      {"haystack_tokens", context.size()},
                      {"needle_token_index", insertion},
                      {"rouge_target", strip(kNiahNeedle)},
                      {"substring_answer", "eat a sandwich and sit in Dolores Park on a sunny day"},
                      {"question", kNiahQuestion},
                      {"stop_at_newline", true}};
      samples.push_back(std::move(sample));
      if (progress) progress(static_cast<int>(samples.size()), total);
    }
  }
  return samples;
}

}  // namespace kvb
