// RULER's needle-in-a-haystack family (scripts/data/synthetic/niah.py, HEAD; docs/benchmarks.md
// §1.2): task arguments from scripts/synthetic.yaml.
#include <algorithm>
#include <map>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/ruler/ruler_constants.h"
#include "datasets/ruler/ruler_task.h"
#include "datasets/text_utils.h"

namespace kvb::ruler {
namespace fs = std::filesystem;

namespace {

enum class Haystack { kNoise, kEssay, kNeedle };

struct NiahArgs {
  Haystack haystack;
  std::string type_k;  // words | numbers | uuids
  std::string type_v;
  int num_k, num_v, num_q;
};

// scripts/synthetic.yaml (HEAD: niah_single_1 uses the `noise` haystack, `repeat` in 2024).
NiahArgs niah_args(const std::string& name) {
  static const std::map<std::string, NiahArgs> kTasks = {
      {"niah_single_1", {Haystack::kNoise, "words", "numbers", 1, 1, 1}},
      {"niah_single_2", {Haystack::kEssay, "words", "numbers", 1, 1, 1}},
      {"niah_single_3", {Haystack::kEssay, "words", "uuids", 1, 1, 1}},
      {"niah_multikey_1", {Haystack::kEssay, "words", "numbers", 4, 1, 1}},
      {"niah_multikey_2", {Haystack::kNeedle, "words", "numbers", 1, 1, 1}},
      {"niah_multikey_3", {Haystack::kNeedle, "uuids", "uuids", 1, 1, 1}},
      {"niah_multivalue", {Haystack::kEssay, "words", "numbers", 1, 4, 1}},
      {"niah_multiquery", {Haystack::kEssay, "words", "numbers", 1, 1, 4}},
  };
  auto it = kTasks.find(name);
  if (it == kTasks.end()) throw InputError("unknown RULER task '" + name + "'");
  NiahArgs args = it->second;
  args.num_k = std::max(args.num_k, args.num_q);  // niah.py forces keys >= queries
  return args;
}

// The essay corpus as niah.py reads it: the files' text concatenated (sorted by name, no
// separator), whitespace runs collapsed to one space, then split(" ") (empty pieces kept).
std::vector<std::string> load_essay_words(const fs::path& folder) {
  std::string text;
  for (const fs::path& file : essay_files(folder, "RULER essay haystack"))
    text += read_text_file(file);
  const std::string collapsed = collapse_whitespace(text);
  std::vector<std::string> words;
  size_t start = 0;
  while (true) {
    const size_t space = collapsed.find(' ', start);
    words.push_back(collapsed.substr(start, space - start));
    if (space == std::string::npos) break;
    start = space + 1;
  }
  return words;
}

class NiahTask : public RulerTask {
 public:
  NiahTask(const std::string& name, const TaskContext& context)
      : args_(niah_args(name)), rng_seed_(context.seed) {
    if (args_.haystack == Haystack::kEssay)
      essay_words_ = load_essay_words(context.data->essays_dir);
    if (args_.type_k == "words" || args_.type_v == "words") {
      // sorted(set(f"{adj}-{noun}")): with the wonderwords lists every (unique adjective, unique
      // noun) pair gives a distinct string, so a uniform choice of the pair is a uniform choice of
      // the word (the index order differs from Python's sorted strings only around hyphens).
      adjectives_ = sorted_unique(load_wonderwords(*context.data, "adjectivelist.txt"));
      nouns_ = sorted_unique(load_wonderwords(*context.data, "nounlist.txt"));
    }
    std::string framed = context.frame->prefix + kNiahTemplate + context.frame->suffix;
    std::string answer_prefix = kNiahAnswerPrefix;
    type_needle_v_ = args_.type_v;
    question_marker_ = kNiahQuestionPluralMarker;
    if (args_.num_q * args_.num_v == 1) {
      // The single-needle rewrite (niah.py): plain substring replacement on the whole template,
      // chat frame and answer prefix included, before formatting; needles stay plural.
      framed = singular(framed);
      answer_prefix = singular(answer_prefix);
      type_needle_v_.pop_back();
      question_marker_ = kNiahQuestionSingularMarker;
    }
    framed_template_ = framed;
    answer_prefix_template_ = answer_prefix;
  }

  int tokens_to_generate() const override { return kNiahTokensToGenerate; }
  int incremental() const override {
    if (args_.haystack == Haystack::kEssay) return 500;
    return max_seq_length < 4096 ? 5 : 25;
  }

  Draft build(int units, int, PythonRandom& rng) override {
    std::vector<std::string> keys, needles;
    std::vector<std::vector<std::string>> values;
    for (int k = 0; k < args_.num_k; ++k) {
      keys.push_back(random_value(args_.type_k, rng));
      values.emplace_back();
      for (int v = 0; v < args_.num_v; ++v) {
        values.back().push_back(random_value(args_.type_v, rng));
        needles.push_back(format_template(kNeedle, {{"type_needle_v", args_.type_v},
                                                    {"key", keys.back()},
                                                    {"value", values.back().back()}}));
      }
    }
    PythonRandom(rng_seed_).shuffle(needles);  // a fresh Random(seed): a fixed permutation

    const std::string context = args_.haystack == Haystack::kEssay
                                    ? essay_context(units, needles, rng)
                                    : line_context(units, needles, rng);

    const std::vector<size_t> picked = rng.sample_indices(args_.num_k, args_.num_q);
    std::vector<std::string> queries;
    std::vector<std::string> answers;
    for (size_t i : picked) {
      queries.push_back(keys[i]);
      for (const std::string& value : values[i]) answers.push_back(value);
    }
    std::string query = queries[0];
    if (queries.size() > 1) {
      query = join(std::vector<std::string>(queries.begin(), queries.end() - 1), ", ") + ", and " +
              queries.back();
    }
    const std::map<std::string, std::string> fields = {
        {"type_needle_v", type_needle_v_}, {"context", context}, {"query", query}};
    Draft draft = split_prompt(format_template(framed_template_ + answer_prefix_template_, fields),
                               format_template(answer_prefix_template_, fields), question_marker_);
    draft.references = answers;
    return draft;
  }

 private:
  static std::vector<std::string> sorted_unique(std::vector<std::string> words) {
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    return words;
  }
  static std::string singular(std::string text) {
    text = replace_all(text, "Some", "A");
    text = replace_all(text, "are all", "is");
    text = replace_all(text, "are", "is");
    return replace_all(text, "answers", "answer");
  }

  std::string random_value(const std::string& type, PythonRandom& rng) const {
    if (type == "numbers") return std::to_string(rng.randint(1000000, 9999999));  // 7 digits
    if (type == "uuids") return rng.uuid4();
    const uint64_t pick = rng.randbelow(adjectives_.size() * nouns_.size());
    return adjectives_[pick / nouns_.size()] + "-" + nouns_[pick % nouns_.size()];
  }

  // Essay: the first `units` words (cyclically), sentences, needles at sampled depths between
  // sentences, pieces joined by single spaces with empty runs kept (docs/benchmarks.md §1.2).
  std::string essay_context(int units, const std::vector<std::string>& needles,
                            PythonRandom& rng) const {
    std::string text;
    for (int i = 0; i < units; ++i) {
      if (i) text.push_back(' ');
      text += essay_words_[static_cast<size_t>(i) % essay_words_.size()];
    }
    const std::vector<std::string> sentences = split_sentences(text);
    const std::vector<int> depth_list(std::begin(kNeedleDepths), std::end(kNeedleDepths));
    std::vector<size_t> positions;
    for (int depth : rng.sample(depth_list, needles.size()))
      positions.push_back(static_cast<size_t>(sentences.size() * (depth / 100.0)));
    std::sort(positions.begin(), positions.end());
    positions.insert(positions.begin(), 0);
    positions.push_back(sentences.size());
    std::vector<std::string> pieces;
    for (size_t i = 1; i < positions.size(); ++i) {
      pieces.push_back(join(std::vector<std::string>(sentences.begin() + positions[i - 1],
                                                     sentences.begin() + positions[i]),
                            " "));
      if (i - 1 < needles.size()) pieces.push_back(needles[i - 1]);
    }
    return join(pieces, " ");
  }

  // Noise or needle haystack: one line per unit, needles inserted at sampled line positions
  // (sorted descending, largest position paired with the first needle), joined with "\n".
  std::string line_context(int units, const std::vector<std::string>& needles,
                           PythonRandom& rng) const {
    std::vector<std::string> lines;
    lines.reserve(units + needles.size());
    for (int i = 0; i < units; ++i) {
      if (args_.haystack == Haystack::kNoise) {
        lines.push_back(kNoise);
      } else {
        const std::string key = random_value(args_.type_k, rng);
        const std::string value = random_value(args_.type_v, rng);
        lines.push_back(format_template(
            kNeedle, {{"type_needle_v", args_.type_v}, {"key", key}, {"value", value}}));
      }
    }
    std::vector<size_t> indexes = rng.sample_indices(units, needles.size());
    std::sort(indexes.rbegin(), indexes.rend());
    for (size_t i = 0; i < indexes.size(); ++i)
      lines.insert(lines.begin() + indexes[i], needles[i]);
    return join(lines, "\n");
  }

  NiahArgs args_;
  uint64_t rng_seed_;
  std::vector<std::string> essay_words_, adjectives_, nouns_;
  std::string framed_template_, answer_prefix_template_, type_needle_v_, question_marker_;
};

}  // namespace

void check_niah_task_data(const std::string& name, const RulerDataPaths& data) {
  const NiahArgs args = niah_args(name);
  if (args.haystack == Haystack::kEssay)
    essay_files(data.essays_dir, "RULER " + name + " (essay haystack)", data.searched);
  if (args.type_k == "words" || args.type_v == "words")
    for (const char* list : {"adjectivelist.txt", "nounlist.txt"}) check_word_list(data, list);
}

std::unique_ptr<RulerTask> make_niah_task(const std::string& name, const TaskContext& context) {
  return std::make_unique<NiahTask>(name, context);
}

}  // namespace kvb::ruler
