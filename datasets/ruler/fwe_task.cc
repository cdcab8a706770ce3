// RULER frequent words extraction (scripts/data/synthetic/freq_words_extraction.py, HEAD;
// docs/benchmarks.md §1.2): random 6-letter "coded words" with Zipf counts (alpha 2); the answer is
// the three most frequent real words. FWE has its own linear sizing instead of the common binary
// search.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/ruler/ruler_constants.h"
#include "datasets/ruler/ruler_task.h"
#include "datasets/text_utils.h"

namespace kvb::ruler {
namespace {

constexpr int kCodedWordLength = 6;
constexpr double kAlpha = 2.0;
constexpr double kZetaOfAlpha = 1.6449340668482264;  // scipy.special.zeta(2.0) = pi^2 / 6

class FweTask : public RulerTask {
 public:
  explicit FweTask(const TaskContext& context) : frame_(*context.frame) {}

  int tokens_to_generate() const override { return kFweTokensToGenerate; }
  int incremental() const override { return std::max(1, budget() / 32); }
  Draft build(int, int, PythonRandom&) override {
    throw std::logic_error("FWE builds through its own sizing");
  }

  std::vector<Draft> generate(int num_samples, PythonRandom& rng, TokenCounter& counter,
                              const ProgressFn& progress) override {
    // HEAD's budget: max_seq_length - tokens_to_generate; vocabulary size budget // 50.
    const int limit = budget();
    const int vocabulary_size = std::max(4, limit / 50);
    if (limit / 50 < 4)
      throw CapacityError("RULER fwe: --length " + std::to_string(max_seq_length) +
                          " is too small for a coded vocabulary; use at least 512");
    // Search with one vocabulary: grow from budget // 6 words until the prompt reaches the budget,
    // then step back once.
    const std::vector<std::string> search_vocabulary = make_vocabulary(vocabulary_size, rng);
    int num_words = limit / kCodedWordLength;
    int tokens_before = 0;
    int tokens_at = counter.fast(text(search_vocabulary, num_words).prompt());
    while (tokens_at < limit) {
      num_words += incremental();
      tokens_before = tokens_at;
      tokens_at = counter.fast(text(search_vocabulary, num_words).prompt());
    }
    // Tokens per word: the last step's slope, or the average when the first size reached the
    // budget.
    const double tokens_per_word =
        tokens_before > 0 ? static_cast<double>(tokens_at - tokens_before) / incremental()
                          : static_cast<double>(tokens_at) / num_words;
    num_words -= incremental();

    // Each sample draws its vocabulary, then (deviation, see ruler.h) takes the largest word count
    // that fits instead of lowering the count by budget // 32 until it fits.
    std::vector<Draft> drafts;
    for (int index = 0; index < num_samples; ++index) {
      const std::vector<std::string> vocabulary = make_vocabulary(vocabulary_size, rng);
      FittedDraft fitted =
          fit_sample([&](int words) { return text(vocabulary, words); }, std::max(1, num_words),
                     tokens_per_word, limit, std::numeric_limits<int>::max(), counter, "RULER fwe");
      Draft& draft = fitted.draft;
      draft.extra["prompt_tokens"] = fitted.tokens;
      draft.extra["haystack_units"] = fitted.units;
      draft.extra["fitted_units"] = num_words;
      draft.extra["incremental"] = incremental();
      drafts.push_back(std::move(draft));
      if (progress) progress(index + 1, num_samples);
    }
    return drafts;
  }

 private:
  int budget() const { return max_seq_length - kFweTokensToGenerate; }

  // Random lowercase words, deduplicated (drawing more until there are enough), sorted, shuffled
  // with a fresh Random(seed); entry 0 becomes "..." (noise).
  std::vector<std::string> make_vocabulary(int size, PythonRandom& rng) const {
    static const std::vector<char> kLetters = [] {
      std::vector<char> letters;
      for (char c = 'a'; c <= 'z'; ++c) letters.push_back(c);
      return letters;
    }();
    const auto random_word = [&] {
      std::string word;
      for (int i = 0; i < kCodedWordLength; ++i) word.push_back(rng.choice(kLetters));
      return word;
    };
    std::vector<std::string> words;
    for (int i = 0; i < size; ++i) words.push_back(random_word());
    const auto unique_sorted = [](std::vector<std::string> list) {
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
      return list;
    };
    while (static_cast<int>(unique_sorted(words).size()) < size) words.push_back(random_word());
    words = unique_sorted(words);
    PythonRandom(seed).shuffle(words);
    words[0] = "...";
    return words;
  }

  // gen_text(): rank k (1-based) repeated int(n * k^-alpha / zeta(alpha)) times, the flat list
  // shuffled with a fresh Random(seed) and joined with spaces.
  Draft text(const std::vector<std::string>& vocabulary, int num_words) const {
    std::vector<std::string> flat;
    for (size_t k = 1; k <= vocabulary.size(); ++k) {
      const int count =
          static_cast<int>(num_words * std::pow(static_cast<double>(k), -kAlpha) / kZetaOfAlpha);
      for (int c = 0; c < count; ++c) flat.push_back(vocabulary[k - 1]);
    }
    PythonRandom(seed).shuffle(flat);
    const std::string framed = frame_.prefix + kFweTemplate + frame_.suffix + kFweAnswerPrefix;
    Draft draft =
        split_prompt(format_template(framed, {{"context", join(flat, " ")}, {"query", ""}}),
                     kFweAnswerPrefix, kFweQuestionMarker);
    draft.references.assign(vocabulary.begin() + 1, vocabulary.begin() + 4);
    return draft;
  }

  ChatFrame frame_;
};

}  // namespace

std::unique_ptr<RulerTask> make_fwe_task(const TaskContext& context) {
  return std::make_unique<FweTask>(context);
}

}  // namespace kvb::ruler
