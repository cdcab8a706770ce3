// The benchmark registry: every benchmark by name, with everything the harness needs of it — the
// config options it takes, how it generates or loads a group's samples and checks their data, how
// an answer is cut from the generated text and scored, and which table layout it feeds. The
// harness never asks which benchmark it holds; it asks the registry (as lm-eval-harness asks a
// task object). Protocols: docs/benchmarks.md.
//
// Adding a benchmark = its file (datasets/<name>/<name>_benchmark.cc, defining
// `<name>_benchmark()`), one line in the table of datasets/registry.cc, a test, a README row. The
// commands `kvbench score` and `kvbench gen-data` reach it through the registry too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "datasets/data_paths.h"
#include "datasets/generation.h"
#include "datasets/sample.h"
#include "engine/tokenizer.h"

namespace kvb {

// One entry of a sweep config's "benchmarks" list, parsed (harness/sweep/config.h). The options
// below `key` apply to the benchmarks that declare them (Benchmark::option_keys):
//   tasks     LongBench datasets; when omitted the benchmark's default tasks
//   lengths   LongBench: the prompt limit in tokens for pred.py's middle truncation; 0 (the
//             default) = the model's context minus the dataset's max new tokens and the chat
//             template. InfiniteBench: prompt + answer budget, as for the generated tasks (a
//             loaded prompt is middle-truncated to length - the task's max new tokens).
//   samples   the first N records of each file; when omitted, every record (generated tasks: 1)
//   data_dir  the folder of the official "{task}.jsonl" files; default data/longbench or
//             data/infinitebench (found like model paths)
//   family    InfiniteBench prompt templates: "yarn-mistral" (open models, default) or "gpt4"
//   generate  InfiniteBench: false loads passkey, number_string, kv_retrieval and math_find from
//             data_dir too, instead of generating them at each length (default true)
struct BenchmarkSpec {
  std::string benchmark;           // a registry name: ruler | niah | longbench | infinitebench
  std::vector<std::string> tasks;  // the benchmark's default tasks when omitted
  std::vector<int> lengths;        // context lengths in tokens (longbench: 0 = model's limit)
  std::vector<double> depths;      // niah only: needle depths in percent
  int samples = 1;                 // per (task, length), and per depth for niah
  bool samples_given = false;      // false: loaded tasks take every record of their file
  uint64_t seed = 42;
  std::optional<int> max_new_tokens;    // overrides the sweep-wide cap for this benchmark
  std::string data_dir;                 // longbench / infinitebench data files (resolved)
  std::string family = "yarn-mistral";  // infinitebench prompt family
  bool generate = true;                 // infinitebench: generate the synthetic tasks
  bool chat_template = false;  // niah: "template": "chat" frames the prompt in the chat template
  std::string key;             // "benchmarks[i]": where it came from, for messages
};

// One (task, length) group of a benchmark: the samples a sweep runs its cells on.
struct TaskGroup {
  const BenchmarkSpec& spec;
  const std::string& task;
  int length = 0;
  int sample_count = 0;  // niah: depths x samples; loaded tasks: records (capped by samples)
};

struct GroupSampleInputs {
  // The model's tokenizer: needed to fit generated samples to a length and to middle-truncate
  // loaded prompts. Null only for loaded benchmarks, whose prompts are then left whole (tests).
  const Tokenizer* tokenizer = nullptr;
  ChatFrame frame;        // the model's chat template around one user message
  DataSearch data;        // essays, word lists, QA files (config data_dir first)
  int model_context = 0;  // tokens; 0 = unknown (no LongBench default truncation)
  ProgressFn progress;    // generators report (done, total) samples; null: silent
};

// `kvbench score`'s options for a predictions file (its command-line flags); a benchmark reads
// the ones that concern it.
struct FileScoreOptions {
  std::string model_name;  // --model-name: InfiniteBench math_calc drops GPT-4's first number
  std::string code_similarity = "difflib";  // --code-sim: LongBench code_sim_score's backend
};

// A field a benchmark reports beside a file's score (NIAH's substring match, LongBench-E's length
// buckets). The text output prints the scalar fields on one line as "label: value" and an object
// field as one "  name value" line per entry.
struct ReportedField {
  std::string key;  // in --json output
  std::string label;
  nlohmann::json value;  // a number, null (NaN in the official scorer), or an object of those
};

// A predictions file scored with the benchmark's official scorer.
struct FileScores {
  std::vector<double> per_record;  // in [0, 1], in file order; every record counts
  double percent = 0;  // the task score, computed in the official scorer's own operation order
  std::vector<ReportedField> reported;
};

// A bad value of one benchmark option: `option` is its config key ("family"), so that the config
// can name "benchmarks[i].family".
class OptionError : public InputError {
 public:
  OptionError(std::string option, const std::string& what)
      : InputError(what), option(std::move(option)) {}
  std::string option;
};

// The table a benchmark's rows feed (harness/report/tables.h).
enum class TableLayout {
  kPerTask,              // one column per task in `table_tasks` order, then the mean
  kLongBenchCategories,  // one column per dataset, then category means
  kDepthGrid,            // depth x context length per policy (NIAH heatmaps)
};

struct Benchmark {
  std::string name;    // in configs, the database and --layout
  std::string title;   // in table titles
  std::string source;  // the official code its protocol follows (docs/benchmarks.md)
  // Config keys of "benchmarks[i]" it takes beyond benchmark, tasks, lengths, samples, seed and
  // max_new_tokens (depths, template, data_dir, family, generate).
  std::vector<std::string> option_keys;
  std::vector<std::string> default_tasks;  // when "tasks" is omitted; empty: "tasks" is required
  bool lengths_optional = false;           // no "lengths": one group at length 0
  TableLayout layout = TableLayout::kPerTask;
  std::vector<std::string> table_tasks;  // the official task order of its table columns
  // Where its data files come from, for the message when one is missing.
  std::string download_hint;

  // After the config is read: fills in option defaults (NIAH's depths) and checks option values
  // (OptionError).
  std::function<void(BenchmarkSpec& spec)> complete_spec;
  // InputError naming an unknown task and the known ones; null accepts any task.
  std::function<void(const std::string& task)> check_task;
  // Whether (spec, task) reads "{task}.jsonl" from spec.data_dir; null: always generated.
  std::function<bool(const BenchmarkSpec& spec, const std::string& task)> loads_from_files;
  // InputError when a generated task's essays, word lists or QA files are missing; null: none.
  std::function<void(const std::string& task, const DataSearch& data)> check_generator_data;
  // The data folders a generated task reads, for the run record ({"haystack", folder}, ...).
  std::function<std::vector<std::pair<std::string, std::filesystem::path>>(const DataSearch& data)>
      generator_folders;
  // The samples of a group, in a deterministic order.
  std::function<std::vector<Sample>(const TaskGroup& group, const GroupSampleInputs& inputs)>
      samples;
  // The answer as scored, cut from the generated text; null: the text as generated.
  std::function<std::string(const std::string& generated, const Sample& sample)> answer;
  // The benchmark's metric for one answer, in [0, 1].
  std::function<double(const std::string& task, const std::string& answer, const Sample& sample)>
      score;
  // Metrics recorded beside the score (an object merged into the row's extra); null: none.
  std::function<nlohmann::json(const std::string& answer, const Sample& sample)> extra_metrics;

  // `kvbench score`: a predictions file made by another harness, in the record layout of the
  // benchmark's official outputs, scored as its official scorer does. Records are read with
  // datasets/prediction_records.h; a record that cannot be scored is a FormatError naming
  // FILE:LINE, never skipped. The task is checked before (check_task). Null: the benchmark scores
  // no files.
  std::function<FileScores(const std::string& task, const std::string& path,
                           const FileScoreOptions& options)>
      score_file;

  // `kvbench gen-data --num K` for a generated task. Null: K samples per (task, length)
  // (spec.samples). Otherwise it sets the spec for K (NIAH: K depths, one sample each).
  std::function<void(BenchmarkSpec& spec, int count)> set_generated_count;
  int generated_count_default = 1;  // --num when omitted
};

const std::vector<Benchmark>& list_benchmarks();
// InputError naming the unknown benchmark and listing the known ones.
const Benchmark& find_benchmark(const std::string& name);
// Null for an unknown name (rows of an older database).
const Benchmark* lookup_benchmark(const std::string& name);

// The generated text turned into the scored answer and its metrics: `answer`, `score`, and
// `extra_metrics` of the sample's benchmark.
struct ScoredAnswer {
  std::string answer;
  double score = 0;
  nlohmann::json extra = nlohmann::json::object();
};
ScoredAnswer score_answer(const std::string& generated, const Sample& sample);

// `kvbench score`: the file scored by `benchmark`. InputError naming the benchmark when it scores
// no files, or the task when the benchmark does not know it (before the file is read).
FileScores score_predictions_file(const Benchmark& benchmark, const std::string& task,
                                  const std::string& path, const FileScoreOptions& options);

// `kvbench gen-data`'s checks, made before a model is loaded: InputError when the benchmark does
// not know the task, loads the task from data files (nothing to generate), or the generator's data
// (essays, word lists, QA files) is missing.
void check_generated_task(const Benchmark& benchmark, const BenchmarkSpec& spec,
                          const std::string& task, const DataSearch& data);
// The samples of one generated (task, length) group: spec.samples per depth (when the spec has
// depths), counted as a sweep counts them.
std::vector<Sample> generated_group_samples(const Benchmark& benchmark, const BenchmarkSpec& spec,
                                            const std::string& task, int length,
                                            const GroupSampleInputs& inputs);

// The tokenizer a generator fits its samples with; an internal error when the caller gave none.
const Tokenizer& group_tokenizer(const TaskGroup& group, const GroupSampleInputs& inputs);

// True when (spec, task) reads "{task}.jsonl" from spec.data_dir instead of generating samples.
bool loads_from_files(const BenchmarkSpec& spec, const std::string& task);
// The task's data file. InputError naming the config key (spec.key + ".data_dir") when the folder
// or the file is missing, with what to download.
std::filesystem::path benchmark_data_file(const BenchmarkSpec& spec, const std::string& task);
// Records in the task's data file (non-blank lines, as the loaders count them); InputError when
// there are none.
int count_data_records(const BenchmarkSpec& spec, const std::string& task);

}  // namespace kvb
