// LongBench v1 (docs/benchmarks.md §3): samples loaded from the official "{dataset}.jsonl" files,
// prompts middle-truncated as pred.py does (to the config's length, or the model's context minus
// the dataset's answer and the chat frame); eval.py's metric per dataset. The table groups the
// datasets by category. Predictions files are LongBench's pred/ files, {"pred", "answers",
// "all_classes"?, "length"?}; a dataset named "X_e" is LongBench-E and reports the length buckets.
#include <map>

#include "common/errors.h"
#include "datasets/jsonl_reader.h"
#include "datasets/longbench/loader.h"
#include "datasets/longbench/longbench.h"
#include "datasets/prediction_records.h"
#include "datasets/registry.h"

namespace kvb {
namespace {

// One line of a pred/ file.
struct PredictionRow {
  std::string pred;
  std::vector<std::string> answers;
  double length = 0;  // LongBench-E
  size_t line = 0;
};

struct PredictionFile {
  std::vector<PredictionRow> rows;
  // eval.py keeps all_classes of the last line read (the same list on every line of a dataset).
  std::vector<std::string> all_classes;
  bool has_classes = false;
};

PredictionFile read_predictions(const std::string& path, bool longbench_e) {
  PredictionFile file;
  for_each_prediction_record(path, [&](const nlohmann::json& record, size_t line) {
    PredictionRow row{prediction_of(record, {"pred"}, path, line), {}, 0, line};
    auto answers = record.find("answers");
    if (answers == record.end())
      throw_record_error(path, line, "LongBench record needs \"answers\"");
    row.answers = strings_of(*answers, path, line, "\"answers\"");
    if (auto classes = record.find("all_classes"); classes != record.end()) {
      file.has_classes = !classes->is_null();
      file.all_classes = file.has_classes ? strings_of(*classes, path, line, "\"all_classes\"")
                                          : std::vector<std::string>();
    }
    if (longbench_e) {
      auto length = record.find("length");
      if (length == record.end() || !length->is_number())
        throw_record_error(path, line, "LongBench-E record needs a numeric \"length\"");
      row.length = length->get<double>();
    }
    file.rows.push_back(std::move(row));
  });
  return file;
}

FuzzBackend code_similarity_backend(const std::string& name) {
  if (name == "difflib") return FuzzBackend::kDifflib;
  if (name == "levenshtein") return FuzzBackend::kLevenshtein;
  throw InputError("--code-sim must be difflib or levenshtein, not '" + name + "'");
}

// eval.py's scorer_e: round(100 * mean, 2) per length bucket; an empty bucket is NaN there
// (np.mean of []), null here.
nlohmann::json length_buckets(const PredictionFile& file, const std::vector<double>& scores) {
  std::map<std::string, std::pair<double, int>> buckets = {
      {"0-4k", {0, 0}}, {"4-8k", {0, 0}}, {"8k+", {0, 0}}};
  for (size_t i = 0; i < scores.size(); ++i) {
    auto& [sum, count] = buckets[longbench_length_bucket(file.rows[i].length)];
    sum += scores[i];
    ++count;
  }
  nlohmann::json by_length = nlohmann::json::object();
  for (const auto& [name, sum_count] : buckets)
    by_length[name] =
        sum_count.second ? nlohmann::json(python_round2(100.0 * sum_count.first / sum_count.second))
                         : nlohmann::json(nullptr);
  return by_length;
}

FileScores score_file(const std::string& task, const std::string& path,
                      const FileScoreOptions& options) {
  const LongBenchDataset& dataset = longbench_dataset(task);
  const FuzzBackend backend = code_similarity_backend(options.code_similarity);
  const bool longbench_e = is_longbench_e_name(task);
  const PredictionFile file = read_predictions(path, longbench_e);
  if (dataset.metric == "classification" && !file.has_classes)
    throw InputError(path + ": " + std::string(dataset.name) +
                     " is scored against \"all_classes\", which no record carries");
  FileScores scores;
  for (const PredictionRow& row : file.rows) {
    try {
      scores.per_record.push_back(
          longbench_score_sample(dataset, row.pred, row.answers, file.all_classes, backend));
    } catch (const InputError& e) {
      throw_record_error(path, row.line, e.what());
    }
  }
  scores.percent = percent_of_total(scores.per_record);
  if (longbench_e)
    scores.reported.push_back(
        {"buckets", "LongBench-E length buckets", length_buckets(file, scores.per_record)});
  return scores;
}

int frame_tokens(const GroupSampleInputs& inputs) {
  if (!inputs.tokenizer || inputs.frame.empty()) return 0;
  return static_cast<int>(
      inputs.tokenizer->encode(inputs.frame.prefix + inputs.frame.suffix, false, true).size());
}

// pred.py's max_length: the group's length when set, else the model's context minus the dataset's
// max new tokens and the chat frame's tokens; 0 means no truncation (context unknown).
int prompt_limit(const TaskGroup& group, const GroupSampleInputs& inputs) {
  if (group.length > 0) return group.length;
  if (inputs.model_context <= 0) return 0;
  const LongBenchDataset& dataset = longbench_dataset(group.task);
  const int frame = dataset.uses_chat_template ? frame_tokens(inputs) : 0;
  const int limit = inputs.model_context - dataset.max_new_tokens - frame;
  if (limit < 1)
    throw InputError("the model's context of " + std::to_string(inputs.model_context) +
                     " tokens leaves no room for a LongBench " + group.task + " prompt");
  return limit;
}

std::vector<Sample> load_group(const TaskGroup& group, const GroupSampleInputs& inputs) {
  LongBenchLoadOptions options;
  options.tokenizer = inputs.tokenizer;
  options.max_length = inputs.tokenizer ? prompt_limit(group, inputs) : 0;
  options.limit = group.sample_count;
  std::vector<Sample> samples = load_longbench(
      benchmark_data_file(group.spec, group.task).parent_path().string(), group.task, options);
  for (Sample& s : samples) s.extra["prompt_limit"] = options.max_length;
  return samples;
}

}  // namespace

Benchmark longbench_benchmark() {
  Benchmark b;
  b.name = "longbench";
  b.title = "LongBench";
  b.source = "THUDM/LongBench LongBench/pred.py, LongBench/eval.py, LongBench/metrics.py";
  b.option_keys = {"data_dir"};
  b.default_tasks = longbench_kv_paper_datasets();
  b.lengths_optional = true;
  b.layout = TableLayout::kLongBenchCategories;
  for (const LongBenchDataset& dataset : longbench_datasets()) {
    b.table_tasks.emplace_back(dataset.name);
    b.table_tasks.push_back(std::string(dataset.name) + "_e");
  }
  b.download_hint =
      "unzip data.zip of the THUDM/LongBench dataset (one {dataset}.jsonl per dataset) there";
  b.check_task = [](const std::string& task) { longbench_dataset(task); };
  b.loads_from_files = [](const BenchmarkSpec&, const std::string&) { return true; };
  b.samples = load_group;
  b.score = [](const std::string& task, const std::string& answer, const Sample& sample) {
    return longbench_score_sample(longbench_dataset(task), answer, sample.references,
                                  sample.all_classes);
  };
  b.score_file = score_file;
  return b;
}

}  // namespace kvb
