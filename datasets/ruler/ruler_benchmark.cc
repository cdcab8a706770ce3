// RULER (docs/benchmarks.md §1): generated samples (datasets/ruler/ruler.h), fitted to each length
// with the model's tokenizer inside its chat frame; scored after RULER's postprocess with
// string_match_part for the QA tasks and string_match_all otherwise. One table column per task.
// Predictions files: {"pred"|"prediction"|"response", "outputs"|"answers"|"references"}.
#include <algorithm>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/jsonl_reader.h"
#include "datasets/metrics/string_match.h"
#include "datasets/prediction_records.h"
#include "datasets/registry.h"
#include "datasets/ruler/ruler.h"
#include "datasets/scoring.h"

namespace kvb {
namespace {

std::vector<py::Text> to_texts(const std::vector<std::string>& strings) {
  std::vector<py::Text> out;
  for (const auto& s : strings) out.push_back(py::T(s));
  return out;
}

void check_ruler_task(const std::string& task) {
  const auto& tasks = ruler_tasks();
  if (std::find(tasks.begin(), tasks.end(), task) != tasks.end()) return;
  const std::string known = join(tasks, ", ");
  throw InputError("unknown RULER task '" + task + "' (known: " + known + ")");
}

double score_ruler_answer(const std::string& task, const std::string& answer,
                          const Sample& sample) {
  check_ruler_task(task);
  const py::Text prediction = ruler_postprocess(py::T(answer));
  const auto references = to_texts(sample.references);
  return ruler_uses_string_match_part(task) ? string_match_part(prediction, references)
                                            : string_match_all(prediction, references);
}

// RULER's evaluate.py: the metric per record, then round(100 * mean, 2).
FileScores score_file(const std::string& task, const std::string& path, const FileScoreOptions&) {
  FileScores scores;
  for_each_prediction_record(path, [&](const nlohmann::json& record, size_t line) {
    const std::string pred = prediction_of(record, {"pred", "prediction", "response"}, path, line);
    const nlohmann::json* references = first_field(record, {"outputs", "answers", "references"});
    if (!references)
      throw_record_error(path, line, "RULER record needs \"outputs\" (the references)");
    Sample sample;
    sample.benchmark = "ruler";
    sample.task = task;
    sample.references = strings_of(*references, path, line, "the references");
    scores.per_record.push_back(score_ruler_answer(task, pred, sample));
  });
  scores.percent = percent_of_mean(scores.per_record);
  return scores;
}

}  // namespace

bool ruler_uses_string_match_part(const std::string& task) { return task.rfind("qa", 0) == 0; }

const std::vector<std::string>& ruler_tasks() {
  // scripts/synthetic.yaml, plus the long names of the three non-NIAH synthetic tasks.
  // clang-format off
  static const std::vector<std::string> tasks = {
      "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
      "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2",
      "variable_tracking", "common_words_extraction", "freq_words_extraction"};
  // clang-format on
  return tasks;
}

Benchmark ruler_benchmark() {
  Benchmark b;
  b.name = "ruler";
  b.title = "RULER";
  b.source = "NVIDIA/RULER scripts/data/synthetic/*.py, scripts/eval/synthetic/constants.py";
  b.layout = TableLayout::kPerTask;
  // The 13 tasks in scripts/synthetic.yaml order.
  // clang-format off
  b.table_tasks = {"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
                   "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery",
                   "vt", "cwe", "fwe", "qa_1", "qa_2"};
  // clang-format on
  b.check_task = check_ruler_task;
  b.check_generator_data = [](const std::string& task, const DataSearch& data) {
    check_ruler_task_data(task, ruler_data_paths(data));
  };
  b.generator_folders = [](const DataSearch& data) {
    const RulerDataPaths paths = ruler_data_paths(data);
    return std::vector<std::pair<std::string, std::filesystem::path>>{
        {"haystack", paths.essays_dir}, {"wordlists", paths.wordlists_dir}};
  };
  b.samples = [](const TaskGroup& group, const GroupSampleInputs& inputs) {
    const GenerationRequest request{
        group.task, group.length, group.spec.samples, group.spec.seed, {}};
    return generate_ruler(request, group_tokenizer(group, inputs), inputs.frame,
                          ruler_data_paths(inputs.data), inputs.progress);
  };
  b.score = score_ruler_answer;
  b.score_file = score_file;
  return b;
}

}  // namespace kvb
