// RULER common words extraction (scripts/data/synthetic/common_words_extraction.py, HEAD; spec
// §1.2): a numbered word list where 10 words repeat often; the one-shot demo repeats the whole
// framed prompt (chat frame and answer prefix included) with its answer, then "\n".
#include <algorithm>

#include "datasets/ruler/ruler_constants.h"
#include "datasets/ruler/ruler_task.h"
#include "datasets/text_utils.h"
#include "engine/errors.h"

namespace kvb::ruler {
namespace {

constexpr int kCommonWords = 10;  // num_cw
constexpr int kCommonRepeats = 30;   // freq_cw
constexpr int kUncommonRepeats = 3;  // freq_ucw

std::string numbered(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) out.push_back(' ');
    out += std::to_string(i + 1) + ". " + words[i];
  }
  return out;
}

class CweTask : public RulerTask {
 public:
  CweTask(const TaskContext& context, TokenCounter& counter)
      : frame_(*context.frame), rng_seed_(context.seed), counter_(counter) {
    // sorted(set(nouns + adjs + verbs)), shuffled once with Random(seed).
    vocabulary_ = load_wonderwords(*context.data, "nounlist.txt");
    for (const char* list : {"adjectivelist.txt", "verblist.txt"})
      for (std::string& word : load_wonderwords(*context.data, list)) vocabulary_.push_back(word);
    std::sort(vocabulary_.begin(), vocabulary_.end());
    vocabulary_.erase(std::unique(vocabulary_.begin(), vocabulary_.end()), vocabulary_.end());
    PythonRandom(context.seed).shuffle(vocabulary_);
  }

  int tokens_to_generate() const override { return kCweTokensToGenerate; }
  int incremental() const override { return 10; }

  // HEAD: int(max_seq_length // tokens_per_word) * 2, tokens per word from a 4096-word sample.
  // HEAD then falls back to a large English word list (english_words.json, Git LFS) beyond the
  // vocabulary; that file is not available here, so the count is capped at the vocabulary size
  // (the 2024 behaviour), which only binds near 128K tokens.
  int search_upper_bound(int) override {
    PythonRandom probe_rng(rng_seed_);
    const int probe_words = std::min<int>(4096, vocabulary_.size());
    const Draft probe = build(probe_words, 0, probe_rng);
    const double tokens_per_word = static_cast<double>(counter_.fast(probe.prompt())) / probe_words;
    const int upper = static_cast<int>(max_seq_length / tokens_per_word) * 2;
    return std::min<int>(upper, vocabulary_.size());
  }

  Draft build(int units, int, PythonRandom& rng) override {
    units = std::min<int>(units, vocabulary_.size());
    const bool short_context = max_seq_length < 4096;
    // The demo's words are drawn before the main list's.
    const auto [demo_list, demo_answer] =
        short_context ? example(20, 3, 1, rng) : example(40, 10, 3, rng);
    const auto [list, answer] = short_context
                                    ? example(units, 6, 1, rng)
                                    : example(units, kCommonRepeats, kUncommonRepeats, rng);
    const std::string framed = frame_.prefix + kCweTemplate + frame_.suffix + kCweAnswerPrefix;
    const std::string demo =
        format_template(framed, {{"context", demo_list}, {"query", ""}}) + " " + numbered(demo_answer);
    const std::string prompt = demo + "\n" + format_template(framed, {{"context", list}, {"query", ""}});
    Draft draft = split_prompt(prompt, kCweAnswerPrefix, kCweQuestionMarker);
    draft.references = answer;
    return draft;
  }

 private:
  // get_example(): N distinct words, the first 10 "common"; repeated, shuffled with a fresh
  // Random(seed), numbered on one line.
  std::pair<std::string, std::vector<std::string>> example(int num_words, int common_repeats,
                                                           int uncommon_repeats,
                                                           PythonRandom& rng) const {
    if (num_words < kCommonWords)
      throw CapacityError("RULER cwe: a list needs at least 10 words");
    const std::vector<std::string> words = rng.sample(vocabulary_, num_words);
    std::vector<std::string> list;
    for (int r = 0; r < common_repeats; ++r)
      list.insert(list.end(), words.begin(), words.begin() + kCommonWords);
    for (int r = 0; r < uncommon_repeats; ++r)
      list.insert(list.end(), words.begin() + kCommonWords, words.end());
    PythonRandom(rng_seed_).shuffle(list);
    return {numbered(list), std::vector<std::string>(words.begin(), words.begin() + kCommonWords)};
  }

  ChatFrame frame_;
  uint64_t rng_seed_;
  TokenCounter& counter_;
  std::vector<std::string> vocabulary_;
};

}  // namespace

std::unique_ptr<RulerTask> make_cwe_task(const TaskContext& context, TokenCounter& counter) {
  return std::make_unique<CweTask>(context, counter);
}

}  // namespace kvb::ruler
