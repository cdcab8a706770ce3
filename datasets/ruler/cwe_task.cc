// RULER common words extraction (scripts/data/synthetic/common_words_extraction.py, HEAD;
// docs/benchmarks.md §1.2): a numbered word list where 10 words repeat often; the one-shot demo
// repeats the whole framed prompt (chat frame and answer prefix included) with its answer, then
// "\n".
//
// Lists longer than the wonderwords vocabulary (8,166 words; only near 128K tokens): HEAD samples
// them from json/english_words.json (a JSON object whose values, in file order, are the words;
// Git LFS, about 8.6 MB), read here from the word-list folder when it is there. Without it the
// list is capped at the vocabulary, as RULER's 2024 code did; such samples fall short of the budget
// and say so in extra.word_list_capped.
#include <algorithm>
#include <fstream>

#include "common/errors.h"
#include "datasets/ruler/ruler_constants.h"
#include "datasets/ruler/ruler_task.h"
#include "datasets/text_utils.h"

namespace kvb::ruler {
namespace {

constexpr int kCommonWords = 10;     // num_cw
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
    english_words_ = load_english_words(context.data->wordlists_dir / "english_words.json");
  }

  int tokens_to_generate() const override { return kCweTokensToGenerate; }
  int incremental() const override { return 10; }

  int max_units() const override {
    return static_cast<int>(std::max(vocabulary_.size(), english_words_.size()));
  }

  // HEAD: int(max_seq_length // tokens_per_word) * 2, tokens per word from a 4096-word sample.
  int search_upper_bound(int) override {
    PythonRandom probe_rng(rng_seed_);
    const int probe_words = std::min<int>(4096, vocabulary_.size());
    const Draft probe = build(probe_words, 0, probe_rng);
    const double tokens_per_word = static_cast<double>(counter_.fast(probe.prompt())) / probe_words;
    const int upper = static_cast<int>(max_seq_length / tokens_per_word) * 2;
    return std::min(upper, max_units());
  }

  Draft build(int units, int, PythonRandom& rng) override {
    units = std::min(units, max_units());
    const bool short_context = max_seq_length < 4096;
    // The demo's words are drawn before the main list's.
    const auto [demo_list, demo_answer] =
        short_context ? example(20, 3, 1, rng) : example(40, 10, 3, rng);
    const auto [list, answer] = short_context
                                    ? example(units, 6, 1, rng)
                                    : example(units, kCommonRepeats, kUncommonRepeats, rng);
    const std::string framed = frame_.prefix + kCweTemplate + frame_.suffix + kCweAnswerPrefix;
    const std::string demo = format_template(framed, {{"context", demo_list}, {"query", ""}}) +
                             " " + numbered(demo_answer);
    const std::string prompt =
        demo + "\n" + format_template(framed, {{"context", list}, {"query", ""}});
    Draft draft = split_prompt(prompt, kCweAnswerPrefix, kCweQuestionMarker);
    draft.references = answer;
    // All of the vocabulary and no english_words.json: a longer list could not be drawn.
    if (english_words_.empty() && units >= static_cast<int>(vocabulary_.size()))
      draft.extra["word_list_capped"] = true;
    return draft;
  }

 private:
  // get_example(): N distinct words, the first 10 "common"; repeated, shuffled with a fresh
  // Random(seed), numbered on one line.
  std::pair<std::string, std::vector<std::string>> example(int num_words, int common_repeats,
                                                           int uncommon_repeats,
                                                           PythonRandom& rng) const {
    if (num_words < kCommonWords) throw CapacityError("RULER cwe: a list needs at least 10 words");
    const std::vector<std::string>& pool =
        num_words <= static_cast<int>(vocabulary_.size()) ? vocabulary_ : english_words_;
    const std::vector<std::string> words = rng.sample(pool, num_words);
    std::vector<std::string> list;
    for (int r = 0; r < common_repeats; ++r)
      list.insert(list.end(), words.begin(), words.begin() + kCommonWords);
    for (int r = 0; r < uncommon_repeats; ++r)
      list.insert(list.end(), words.begin() + kCommonWords, words.end());
    PythonRandom(rng_seed_).shuffle(list);
    return {numbered(list), std::vector<std::string>(words.begin(), words.begin() + kCommonWords)};
  }

  // HEAD's `list(json.load(f).values())`: the values in file order (empty when the file is absent).
  static std::vector<std::string> load_english_words(const std::filesystem::path& path) {
    if (!std::filesystem::exists(path)) return {};
    std::ifstream in(path);
    try {
      const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(in);
      std::vector<std::string> words;
      for (const auto& entry : parsed.items()) words.push_back(entry.value().get<std::string>());
      return words;
    } catch (const nlohmann::json::exception& error) {
      throw FormatError(path.string() +
                        " is not RULER's english_words.json (a JSON object of "
                        "index -> word): " +
                        error.what());
    }
  }

  ChatFrame frame_;
  uint64_t rng_seed_;
  TokenCounter& counter_;
  std::vector<std::string> vocabulary_;
  std::vector<std::string> english_words_;  // HEAD's fallback list beyond the vocabulary
};

}  // namespace

std::unique_ptr<RulerTask> make_cwe_task(const TaskContext& context, TokenCounter& counter) {
  return std::make_unique<CweTask>(context, counter);
}

}  // namespace kvb::ruler
