// kvbench score: scores a predictions file with a benchmark's official metric.
//   kvbench score --benchmark longbench|infinitebench|ruler|niah --dataset D --predictions FILE.jsonl
//                 [--per-sample] [--json] [--model-name NAME] [--code-sim difflib|levenshtein]
// Records:
//   longbench      {"pred", "answers", "all_classes"?, "length"?} (LongBench's pred/ files); a
//                  dataset named "X_e" is LongBench-E and also reports the length buckets
//   infinitebench  {"prediction"|"pred", "ground_truth"|"label"} (InfiniteBench's results/ files)
//   ruler          {"pred"|"prediction", "outputs"|"answers"|"references"}
//   niah           {"pred"|"prediction"|"response", "answers"|"references"|"outputs"?, "needle"?}:
//                  score = word recall (heatmap), plus substring_match and rouge1_f10
// The score is round(100 * mean, 2) over every record; a record that cannot be scored is an error
// naming the file and line, never skipped. Blank lines are not records.
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "datasets/infinitebench/scorers.h"
#include "datasets/jsonl_reader.h"
#include "datasets/longbench/longbench.h"
#include "datasets/metrics/string_match.h"
#include "datasets/niah/niah.h"
#include "datasets/scoring.h"
#include "engine/errors.h"
#include "harness/args.h"
#include "harness/cli.h"

namespace kvb::cli {
namespace {

struct ScoredRecord {
  double score = 0;
  double length = 0;         // LongBench-E
  double substring = 0;      // NIAH
  double rouge1_f10 = 0;     // NIAH, KVCache-Factory's stored 0-10 score
};

const nlohmann::json* first_field(const nlohmann::json& record, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = record.find(key);
    if (it != record.end()) return &*it;
  }
  return nullptr;
}

std::string prediction_of(const nlohmann::json& record, std::initializer_list<const char*> keys,
                          const std::string& path, size_t line) {
  const nlohmann::json* value = first_field(record, keys);
  if (!value || !value->is_string()) {
    std::string names;
    for (const char* k : keys) names += (names.empty() ? "\"" : " or \"") + std::string(k) + "\"";
    throw_record_error(path, line, "record needs a string prediction field " + names);
  }
  return value->get<std::string>();
}

std::vector<std::string> strings_of(const nlohmann::json& value, const std::string& path, size_t line,
                                    const std::string& what) {
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) throw_record_error(path, line, what + " must be a list of strings");
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string()) throw_record_error(path, line, what + " must be a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::vector<ScoredRecord> score_longbench(const std::string& path, const std::string& dataset_name,
                                          FuzzBackend backend, bool longbench_e) {
  const LongBenchDataset& dataset = longbench_dataset(dataset_name);
  struct Row {
    std::string pred;
    std::vector<std::string> answers;
    double length;
    size_t line;
  };
  std::vector<Row> rows;
  std::vector<std::string> all_classes;
  bool has_classes = false;
  for_each_jsonl_record(path, [&](const nlohmann::json& record, size_t line) {
    Row row{prediction_of(record, {"pred"}, path, line), {}, 0, line};
    auto answers = record.find("answers");
    if (answers == record.end()) throw_record_error(path, line, "LongBench record needs \"answers\"");
    row.answers = strings_of(*answers, path, line, "\"answers\"");
    // eval.py keeps all_classes of the last line read (the same list on every line of a dataset).
    if (auto classes = record.find("all_classes"); classes != record.end()) {
      all_classes = classes->is_null() ? std::vector<std::string>() : strings_of(*classes, path, line, "\"all_classes\"");
      has_classes = !classes->is_null();
    }
    if (longbench_e) {
      auto length = record.find("length");
      if (length == record.end() || !length->is_number())
        throw_record_error(path, line, "LongBench-E record needs a numeric \"length\"");
      row.length = length->get<double>();
    }
    rows.push_back(std::move(row));
  });
  if (dataset.metric == "classification" && !has_classes)
    throw InputError(path + ": " + std::string(dataset.name) + " is scored against \"all_classes\", which no record carries");
  std::vector<ScoredRecord> scored;
  for (const Row& row : rows) {
    try {
      scored.push_back({longbench_score_sample(dataset, row.pred, row.answers, all_classes, backend), row.length, 0});
    } catch (const InputError& e) {
      throw_record_error(path, row.line, e.what());
    }
  }
  return scored;
}

std::vector<ScoredRecord> score_records(const std::string& benchmark, const std::string& dataset,
                                        const std::string& path, const Args& args) {
  std::vector<ScoredRecord> scored;
  if (benchmark == "longbench") {
    const std::string backend_name = args.get_or("code-sim", "difflib");
    if (backend_name != "difflib" && backend_name != "levenshtein")
      throw InputError("kvbench score: --code-sim must be difflib or levenshtein, not '" + backend_name + "'");
    const FuzzBackend backend = backend_name == "difflib" ? FuzzBackend::kDifflib : FuzzBackend::kLevenshtein;
    return score_longbench(path, dataset, backend, is_longbench_e_name(dataset));
  }
  if (benchmark == "infinitebench") {
    if (!is_infinitebench_task(dataset)) infinitebench_score_one(dataset, "", nullptr);  // unknown-task error
    const std::string model_name = args.get_or("model-name", "");
    for_each_jsonl_record(path, [&](const nlohmann::json& record, size_t line) {
      const std::string pred = prediction_of(record, {"prediction", "pred"}, path, line);
      const nlohmann::json* label = first_field(record, {"ground_truth", "label"});
      if (!label) throw_record_error(path, line, "record needs \"ground_truth\" or \"label\"");
      try {
        scored.push_back({infinitebench_score_one(dataset, pred, *label, model_name), 0, 0});
      } catch (const InputError& e) {
        throw_record_error(path, line, e.what());
      }
    });
    return scored;
  }
  if (benchmark == "ruler" || benchmark == "niah") {
    if (benchmark == "ruler") {
      Sample probe;
      score_sample(benchmark, dataset, "", probe);  // validates the task name
    }
    for_each_jsonl_record(path, [&](const nlohmann::json& record, size_t line) {
      Sample sample;
      sample.benchmark = benchmark;
      sample.task = dataset;
      const std::string pred = prediction_of(record, {"pred", "prediction", "response"}, path, line);
      const nlohmann::json* refs = first_field(record, {"outputs", "answers", "references"});
      if (refs) sample.references = strings_of(*refs, path, line, "the references");
      else if (benchmark == "ruler") throw_record_error(path, line, "RULER record needs \"outputs\" (the references)");
      ScoredRecord r{score_sample(benchmark, dataset, pred, sample), 0, 0};
      if (benchmark == "niah") {
        const py::Text expected =
            sample.references.empty() ? py::Text(kNiahExpectedAnswer) : py::T(sample.references[0]);
        r.substring = niah_substring_match(py::T(pred), expected);
        const nlohmann::json* needle = first_field(record, {"needle"});
        r.rouge1_f10 = niah_rouge1_f_times_10(py::T(pred), needle && needle->is_string()
                                                               ? py::T(needle->get<std::string>())
                                                               : py::T(kNiahNeedle));
      }
      scored.push_back(r);
    });
    return scored;
  }
  throw InputError("kvbench score: unknown --benchmark '" + benchmark + "' (longbench, infinitebench, ruler, niah)");
}

double sum_of(const std::vector<ScoredRecord>& rows, double ScoredRecord::*field) {
  double sum = 0;
  for (const auto& r : rows) sum += r.*field;  // sequential, as the Python loops add
  return sum;
}

// The task score in percent with each scorer's own operation order: LongBench's eval.py computes
// round(100 * total / n, 2); the others take the mean first and scale it.
double percent(const std::string& benchmark, const std::vector<ScoredRecord>& rows, double ScoredRecord::*field) {
  const double n = static_cast<double>(rows.size());
  const double sum = sum_of(rows, field);
  return python_round2(benchmark == "longbench" ? 100.0 * sum / n : 100.0 * (sum / n));
}

nlohmann::json number_or_null(double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); }

}  // namespace

int score(const std::vector<std::string>& argv) {
  const Args args("score", argv, {"json", "per-sample"});
  args.allow_only({"benchmark", "dataset", "predictions", "json", "per-sample", "model-name", "code-sim"});
  const std::string benchmark = args.get("benchmark");
  const std::string dataset = args.get("dataset");
  const std::string path = args.get("predictions");
  const std::vector<ScoredRecord> rows = score_records(benchmark, dataset, path, args);
  if (rows.empty()) throw InputError("kvbench score: '" + path + "' holds no records to score");

  nlohmann::json out;
  out["benchmark"] = benchmark;
  out["dataset"] = dataset;
  out["num_samples"] = rows.size();
  out["score"] = percent(benchmark, rows, &ScoredRecord::score);
  if (benchmark == "niah") {
    out["substring_match"] = percent(benchmark, rows, &ScoredRecord::substring);
    out["rouge1_f10"] = python_round2(sum_of(rows, &ScoredRecord::rouge1_f10) / static_cast<double>(rows.size()));
  }
  if (benchmark == "longbench" && is_longbench_e_name(dataset)) {
    std::map<std::string, std::pair<double, int>> buckets = {{"0-4k", {0, 0}}, {"4-8k", {0, 0}}, {"8k+", {0, 0}}};
    for (const auto& r : rows) {
      auto& [sum, count] = buckets[longbench_length_bucket(r.length)];
      sum += r.score;
      ++count;
    }
    nlohmann::json by_length;
    for (const auto& [name, sum_count] : buckets)  // an empty bucket is NaN in eval.py (np.mean of [])
      by_length[name] = number_or_null(sum_count.second ? python_round2(100.0 * sum_count.first / sum_count.second)
                                                        : std::numeric_limits<double>::quiet_NaN());
    out["buckets"] = by_length;
  }
  if (args.flag("per-sample")) {
    nlohmann::json per_sample = nlohmann::json::array();
    for (const auto& r : rows) per_sample.push_back(r.score);
    out["per_sample"] = per_sample;
  }
  if (args.flag("json")) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%s %s: %.2f (%zu samples)\n", benchmark.c_str(), dataset.c_str(), out["score"].get<double>(), rows.size());
  if (out.contains("substring_match"))
    std::printf("substring match: %.2f, ROUGE-1 F x10 (stored KVCache-Factory score): %.2f\n",
                out["substring_match"].get<double>(), out["rouge1_f10"].get<double>());
  if (out.contains("buckets"))
    for (const auto& [name, value] : out["buckets"].items())
      std::printf("  %-5s %s\n", name.c_str(), value.is_null() ? "nan" : std::to_string(value.get<double>()).c_str());
  if (args.flag("per-sample"))
    for (size_t i = 0; i < rows.size(); ++i) std::printf("  %zu\t%.6f\n", i, rows[i].score);
  return 0;
}

}  // namespace kvb::cli
