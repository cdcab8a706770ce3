// RULER variable tracking (scripts/data/synthetic/variable_tracking.py, HEAD; docs/benchmarks.md
// §1.2): one chain of 5 names over 4 hops hidden in the noise haystack, with the always-on one-shot
// demo.
#include <algorithm>

#include "common/strings.h"
#include "datasets/ruler/ruler_constants.h"
#include "datasets/ruler/ruler_task.h"
#include "datasets/text_utils.h"

namespace kvb::ruler {
namespace {

constexpr int kNumChains = 1;
constexpr int kNumHops = 4;
constexpr char kDemoValue[] = "12345";

const std::vector<char>& uppercase() {
  static const std::vector<char> kLetters = [] {
    std::vector<char> letters;
    for (char c = 'A'; c <= 'Z'; ++c) letters.push_back(c);
    return letters;
  }();
  return kLetters;
}

std::string random_name(int length, PythonRandom& rng) {
  const std::vector<char> letters = rng.choices(uppercase(), length);
  return std::string(letters.begin(), letters.end());
}

struct Chains {
  std::vector<std::vector<std::string>> names;
  std::vector<std::vector<std::string>> statements;
};

// generate_chains(): names drawn with random.choices; distinctness checked over the whole list (a
// collision appends names, which form an extra partial chain, as in RULER).
Chains make_chains(int name_length, bool demo, PythonRandom& rng) {
  const int per_chain = kNumHops + 1;
  std::vector<std::string> names;
  for (int i = 0; i < per_chain * kNumChains; ++i) names.push_back(random_name(name_length, rng));
  const auto distinct = [&] {
    std::vector<std::string> copy = names;
    std::sort(copy.begin(), copy.end());
    return static_cast<int>(std::unique(copy.begin(), copy.end()) - copy.begin());
  };
  while (distinct() < per_chain * kNumChains) names.push_back(random_name(name_length, rng));
  Chains chains;
  for (size_t i = 0; i < names.size(); i += per_chain) {
    std::vector<std::string> chain_names(names.begin() + i,
                                         names.begin() + std::min(names.size(), i + per_chain));
    // np.random.randint(10000, 99999): 10000..99998.
    std::vector<std::string> statements = {
        "VAR " + chain_names[0] + " = " +
        (demo ? std::string(kDemoValue) : std::to_string(rng.randint(10000, 99998)))};
    for (size_t j = 0; j + 1 < chain_names.size(); ++j)
      statements.push_back("VAR " + chain_names[j + 1] + " = VAR " + chain_names[j] + " ");
    chains.names.push_back(std::move(chain_names));
    chains.statements.push_back(std::move(statements));
  }
  return chains;
}

class VtTask : public RulerTask {
 public:
  VtTask(const TaskContext& context, TokenCounter& counter)
      : frame_(*context.frame), demo_mode_(false) {
    // The one-shot demo: the same generator at max_seq_length 500, tokens_to_generate 0, noise
    // increment 5, 3-letter names, value 12345, the bare template plus answer prefix.
    VtTask demo_task(true);
    demo_task.max_seq_length = 500;
    demo_task.seed = context.seed;
    demo_task.task_name = "vt (one-shot demo)";
    PythonRandom demo_rng(context.seed);
    Draft demo = demo_task.generate(1, demo_rng, counter, nullptr).front();
    demo_text_ = demo.prompt() + " " + join(demo.references, " ") + "\n";
    demo_tokens_ = counter.fast(demo_text_);
  }

  // HEAD sizes the haystack on the task alone and adds the demo's token count, so the tokens per
  // unit (and the search's upper end) leave the demo out.
  int search_upper_bound(int first_probe_tokens) override {
    return RulerTask::search_upper_bound(std::max(1, first_probe_tokens - demo_tokens_));
  }

  int tokens_to_generate() const override { return demo_mode_ ? 0 : kVtTokensToGenerate; }
  int incremental() const override { return demo_mode_ || max_seq_length < 4096 ? 5 : 10; }

  Draft build(int units, int, PythonRandom& rng) override {
    const Chains chains = make_chains(demo_mode_ ? 3 : 5, demo_mode_, rng);
    std::vector<std::string> lines(units, kNoise);
    if (lines.size() <= chains.statements[0].size()) {
      // Too few noise units for the chain: split them into sentences (as RULER does).
      std::vector<std::string> split;
      for (const std::string& noise : lines) {
        size_t start = 0;
        while (true) {
          const size_t dot = noise.find('.', start);
          std::string piece = noise.substr(start, dot == std::string::npos ? dot : dot - start);
          split.push_back(strip(piece).empty() ? piece : piece + ".");
          if (dot == std::string::npos) break;
          start = dot + 1;
        }
      }
      lines = split;
    }
    for (const std::vector<std::string>& chain : chains.statements) {
      std::vector<size_t> positions = rng.sample_indices(lines.size(), chain.size());
      std::sort(positions.begin(), positions.end());
      for (size_t j = 0; j < chain.size(); ++j)
        lines.insert(lines.begin() + positions[j] + j, chain[j]);
    }
    const std::string context = replace_all(join(lines, "\n"), ". \n", ".\n");
    const std::string& first = chains.statements[0][0];
    const std::string value = strip(first.substr(first.rfind('=') + 1));
    const std::map<std::string, std::string> fields = {
        {"context", context}, {"query", value}, {"num_v", std::to_string(kNumHops + 1)}};

    std::string prompt;
    if (demo_mode_) {
      prompt = format_template(std::string(kVtTemplate) + kVtAnswerPrefix, fields);
    } else {
      prompt =
          format_template(frame_.prefix + kVtTemplate + frame_.suffix + kVtAnswerPrefix, fields);
      // Insert the (re-randomised) demo before the task text, separated by "\n\n".
      const size_t at = prompt.find(std::string(kVtTemplate).substr(0, 20));
      prompt.insert(at, randomized_demo(rng) + "\n");
    }
    Draft draft = split_prompt(prompt, format_template(kVtAnswerPrefix, fields), kVtQuestionMarker);
    draft.references = chains.names[0];
    return draft;
  }

 private:
  explicit VtTask(bool demo_mode) : demo_mode_(demo_mode) {}

  // Each of the demo's last 5 whitespace tokens (its answer names) replaced everywhere by a fresh
  // random name of the same length, then the value 12345 by a fresh value.
  std::string randomized_demo(PythonRandom& rng) const {
    std::string demo = demo_text_;
    const std::vector<std::string> tokens = split_whitespace(demo_text_);
    for (size_t i = tokens.size() - (kNumHops + 1); i < tokens.size(); ++i)
      demo = replace_all(demo, tokens[i], random_name(static_cast<int>(tokens[i].size()), rng));
    return replace_all(demo, kDemoValue, std::to_string(rng.randint(10000, 99998)));
  }

  ChatFrame frame_;
  bool demo_mode_;
  std::string demo_text_;
  int demo_tokens_ = 0;
};

}  // namespace

std::unique_ptr<RulerTask> make_vt_task(const TaskContext& context, TokenCounter& counter) {
  return std::make_unique<VtTask>(context, counter);
}

}  // namespace kvb::ruler
