// Internal to datasets/ruler: the interface each RULER task family implements, and the helpers
// they share (template formatting, the prompt split, the size search).
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/generation.h"
#include "datasets/python_random.h"
#include "datasets/ruler/ruler.h"
#include "datasets/text_utils.h"

namespace kvb::ruler {

// One generated prompt, already split into the Sample's parts.
struct Draft {
  std::string context_part;
  std::string question_part;
  std::string answer_prefix;
  std::vector<std::string> references;
  nlohmann::json extra = nlohmann::json::object();

  std::string prompt() const { return context_part + question_part + answer_prefix; }
};

class RulerTask {
 public:
  virtual ~RulerTask() = default;
  virtual int tokens_to_generate() const = 0;
  // Haystack units added per step of RULER's search (essay 500, noise/needle 25 or 5, ...).
  virtual int incremental() const = 0;
  // Upper end of the binary search, given the first probe (HEAD: 3x the length in units).
  virtual int search_upper_bound(int first_probe_tokens);
  // Most haystack units one sample can hold (CWE: the size of its word list); unbounded otherwise.
  virtual int max_units() const { return std::numeric_limits<int>::max(); }
  // A fresh random sample with `units` haystack units; `index` is the sample number (QA uses it).
  virtual Draft build(int units, int index, PythonRandom& rng) = 0;
  // Whole procedure; the default is HEAD's binary search + per-sample retry. FWE overrides it.
  virtual std::vector<Draft> generate(int num_samples, PythonRandom& rng, TokenCounter& counter,
                                      const ProgressFn& progress);

  int max_seq_length = 4096;
  uint64_t seed = 42;
  std::string task_name;
};

// One sample fitted to the budget: the draft, its haystack size and its exact prompt tokens.
struct FittedDraft {
  Draft draft;
  int units = 0;
  int tokens = 0;
};

// The per-sample fit that replaces RULER's "drop `incremental` units and redraw" retry (a
// deliberate deviation, explained in ruler.h): starting at `start_units` (the official search's
// size), find the largest haystack size whose own fresh draw fits `budget`, stepping by the
// overshoot or the slack divided by `tokens_per_unit`, bisecting once a size has overflowed, and
// redrawing a few times while more than 5% of the budget is left. Returns the fullest draw that
// fitted. `build(units)` must make a fresh random draw of that size. Throws CapacityError
// (naming `what`) when not even one unit fits.
FittedDraft fit_sample(const std::function<Draft(int units)>& build, int start_units,
                       double tokens_per_unit, int budget, int max_units, TokenCounter& counter,
                       const std::string& what);

// `framed_template` = frame prefix + task template + frame suffix + answer prefix, formatted; the
// answer prefix is cut off the end and the question starts at the last `question_marker`.
Draft split_prompt(const std::string& formatted, const std::string& formatted_answer_prefix,
                   const std::string& question_marker);

// What a task needs to build its prompt, shared by the factories.
struct TaskContext {
  const ChatFrame* frame;
  const RulerDataPaths* data;
  int max_seq_length;
  uint64_t seed;
};

std::unique_ptr<RulerTask> make_niah_task(const std::string& name, const TaskContext& context);
std::unique_ptr<RulerTask> make_vt_task(const TaskContext& context, TokenCounter& counter);
std::unique_ptr<RulerTask> make_cwe_task(const TaskContext& context, TokenCounter& counter);
std::unique_ptr<RulerTask> make_fwe_task(const TaskContext& context);
std::unique_ptr<RulerTask> make_qa_task(const std::string& name, const TaskContext& context);

// Word lists (wonderwords' reader: lines with trailing whitespace removed), with an InputError
// naming the folder and setup.sh when absent.
std::vector<std::string> load_wonderwords(const RulerDataPaths& data, const std::string& list);
void check_word_list(const RulerDataPaths& data, const std::string& list);

// What check_ruler_task_data() asks of the task families that read data files.
void check_niah_task_data(const std::string& name, const RulerDataPaths& data);
void check_qa_task_data(const std::string& name, const RulerDataPaths& data);

}  // namespace kvb::ruler
