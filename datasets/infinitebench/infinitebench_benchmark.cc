// InfiniteBench (docs/benchmarks.md §4): passkey, number_string, kv_retrieval and math_find are
// generated at each length in the released record schema (unless "generate": false); the other
// tasks are loaded from the official "{task}.jsonl" files and middle-truncated to the length minus
// the task's answer. Prompts follow the configured family's templates; compute_scores.py's scorer
// per task. One table column per task. Predictions files are InfiniteBench's results/ files,
// {"prediction"|"pred", "ground_truth"|"label"}.
#include <algorithm>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/infinitebench/generate.h"
#include "datasets/infinitebench/loader.h"
#include "datasets/infinitebench/prompts.h"
#include "datasets/infinitebench/scorers.h"
#include "datasets/jsonl_reader.h"
#include "datasets/prediction_records.h"
#include "datasets/registry.h"

namespace kvb {
namespace {

bool is_generated(const BenchmarkSpec& spec, const std::string& task) {
  if (!spec.generate) return false;
  const auto& generated = infinitebench_generated_tasks();
  return std::find(generated.begin(), generated.end(), task) != generated.end();
}

std::vector<Sample> generate_group(const TaskGroup& group, const GroupSampleInputs& inputs,
                                   const InfiniteBenchLoadOptions& options) {
  // The generators emit records in the released schema; the loader's prompt code does the rest.
  const GenerationRequest request{
      group.task, group.length, group.sample_count, group.spec.seed, {}};
  const auto records =
      generate_infinitebench_records(request, group_tokenizer(group, inputs), inputs.progress);
  std::vector<Sample> samples;
  for (size_t i = 0; i < records.size(); ++i) {
    Sample sample = infinitebench_sample_from_record(
        records[i], group.task, "generated " + group.task + " record " + std::to_string(i),
        options);
    sample.id = group.task + "/" + std::to_string(group.length) + "/" + std::to_string(i);
    sample.length = group.length;
    sample.extra["seed"] = group.spec.seed;
    sample.extra["generated"] = true;
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::vector<Sample> group_samples(const TaskGroup& group, const GroupSampleInputs& inputs) {
  const BenchmarkSpec& spec = group.spec;
  InfiniteBenchLoadOptions options;
  options.family = infinitebench_family(spec.family);
  if (is_generated(spec, group.task)) return generate_group(group, inputs, options);
  // A loaded prompt gets the budget a generated one has: length minus the answer's tokens.
  const int answer_tokens = infinitebench_max_new_tokens(group.task);
  const int prompt_limit = group.length - answer_tokens;
  if (prompt_limit < 1)
    throw InputError(spec.key + ".lengths: " + std::to_string(group.length) +
                     " tokens leave no room for an InfiniteBench " + group.task + " prompt (it " +
                     "generates up to " + std::to_string(answer_tokens) +
                     " tokens); use a larger length");
  options.tokenizer = inputs.tokenizer;
  options.max_length = prompt_limit;
  options.limit = group.sample_count;
  std::vector<Sample> samples = load_infinitebench(
      benchmark_data_file(spec, group.task).parent_path().string(), group.task, options);
  for (Sample& s : samples) {
    s.length = group.length;
    s.extra["prompt_limit"] = prompt_limit;
  }
  return samples;
}

// compute_scores.py: the label keeps its JSON type (a list, a string or a number).
FileScores score_file(const std::string& task, const std::string& path,
                      const FileScoreOptions& options) {
  FileScores scores;
  for_each_prediction_record(path, [&](const nlohmann::json& record, size_t line) {
    const std::string pred = prediction_of(record, {"prediction", "pred"}, path, line);
    const nlohmann::json* label = first_field(record, {"ground_truth", "label"});
    if (!label) throw_record_error(path, line, "record needs \"ground_truth\" or \"label\"");
    try {
      scores.per_record.push_back(infinitebench_score_one(task, pred, *label, options.model_name));
    } catch (const InputError& e) {
      throw_record_error(path, line, e.what());
    }
  });
  scores.percent = percent_of_mean(scores.per_record);
  return scores;
}

}  // namespace

Benchmark infinitebench_benchmark() {
  Benchmark b;
  b.name = "infinitebench";
  b.title = "InfiniteBench";
  b.source = "OpenBMB/InfiniteBench src/eval_yarn_mistral.py, src/compute_scores.py";
  b.option_keys = {"data_dir", "family", "generate"};
  b.layout = TableLayout::kPerTask;
  // The 12 tasks of src/eval_utils.py.
  // clang-format off
  b.table_tasks = {"passkey", "number_string", "kv_retrieval", "longbook_sum_eng",
                   "longbook_choice_eng", "longbook_qa_eng", "longbook_qa_chn",
                   "longdialogue_qa_eng", "math_find", "math_calc", "code_run", "code_debug"};
  // clang-format on
  b.download_hint =
      "put the task files of the xinrongzhang2022/InfiniteBench dataset ({task}.jsonl) there";
  b.complete_spec = [](BenchmarkSpec& spec) {
    try {
      infinitebench_family(spec.family);
    } catch (const InputError& e) {
      throw OptionError("family", e.what());
    }
  };
  b.check_task = [](const std::string& task) {
    if (is_infinitebench_task(task)) return;
    const std::string known = join(infinitebench_tasks(), ", ");
    throw InputError("unknown InfiniteBench task '" + task + "' (known: " + known + ")");
  };
  b.loads_from_files = [](const BenchmarkSpec& spec, const std::string& task) {
    return !is_generated(spec, task);
  };
  b.samples = group_samples;
  // Against the raw label when the record has one (it keeps its JSON type), else the references.
  b.score = [](const std::string& task, const std::string& answer, const Sample& sample) {
    if (sample.extra.is_object() && sample.extra.contains("label"))
      return infinitebench_score_one(task, answer, sample.extra["label"]);
    return infinitebench_score_one(task, answer, nlohmann::json(sample.references));
  };
  b.score_file = score_file;
  return b;
}

}  // namespace kvb
