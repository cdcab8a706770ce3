// kvbench score: scores a predictions file with a benchmark's official metric.
//   kvbench score --benchmark NAME --dataset D --predictions FILE.jsonl
//                 [--per-sample] [--json] [--model-name NAME] [--code-sim difflib|levenshtein]
// NAME is a benchmark of the registry that scores files (datasets/registry.h,
// Benchmark::score_file; each benchmark's file says which record layout it reads), e.g.
//   kvbench score --benchmark longbench --dataset qasper_e --predictions pred_e/qasper.jsonl
// The score is the task percent as the benchmark's official scorer computes it, over every record;
// the fields the benchmark reports beside it follow (NIAH's substring match, LongBench-E's length
// buckets). A record that cannot be scored is an error naming the file and line, never skipped.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "datasets/registry.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"

namespace kvb::cli {
namespace {

nlohmann::json summary_json(const std::string& benchmark, const std::string& dataset,
                            const FileScores& scores, bool per_sample) {
  nlohmann::json out;
  out["benchmark"] = benchmark;
  out["dataset"] = dataset;
  out["num_samples"] = scores.per_record.size();
  out["score"] = scores.percent;
  for (const ReportedField& field : scores.reported) out[field.key] = field.value;
  if (per_sample) out["per_sample"] = scores.per_record;
  return out;
}

// A reported number: null is NaN in the official scorer.
std::string number_text(const nlohmann::json& value, const char* format) {
  if (value.is_null()) return "nan";
  char text[64];
  std::snprintf(text, sizeof text, format, value.get<double>());
  return text;
}

// Scalar fields on one line ("label: 12.34, label: 5.67"), then each object field's entries.
void print_reported(const std::vector<ReportedField>& reported) {
  std::string scalars;
  for (const ReportedField& field : reported)
    if (!field.value.is_object())
      scalars +=
          (scalars.empty() ? "" : ", ") + field.label + ": " + number_text(field.value, "%.2f");
  if (!scalars.empty()) std::printf("%s\n", scalars.c_str());
  for (const ReportedField& field : reported)
    if (field.value.is_object())
      for (const auto& [name, value] : field.value.items())
        std::printf("  %-5s %s\n", name.c_str(), number_text(value, "%f").c_str());
}

void print_text(const std::string& benchmark, const std::string& dataset, const FileScores& scores,
                bool per_sample) {
  std::printf("%s %s: %.2f (%zu samples)\n", benchmark.c_str(), dataset.c_str(), scores.percent,
              scores.per_record.size());
  print_reported(scores.reported);
  if (per_sample)
    for (size_t i = 0; i < scores.per_record.size(); ++i)
      std::printf("  %zu\t%.6f\n", i, scores.per_record[i]);
}

}  // namespace

int score(const std::vector<std::string>& argv) {
  const Args args("score", argv, {"json", "per-sample"});
  args.allow_only(
      {"benchmark", "dataset", "predictions", "json", "per-sample", "model-name", "code-sim"});
  const std::string benchmark = args.get("benchmark");
  const std::string dataset = args.get("dataset");
  FileScoreOptions options;
  options.model_name = args.get_or("model-name", "");
  options.code_similarity = args.get_or("code-sim", options.code_similarity);
  const FileScores scores =
      score_predictions_file(find_benchmark(benchmark), dataset, args.get("predictions"), options);
  if (args.flag("json"))
    std::printf("%s\n",
                summary_json(benchmark, dataset, scores, args.flag("per-sample")).dump().c_str());
  else
    print_text(benchmark, dataset, scores, args.flag("per-sample"));
  return 0;
}

}  // namespace kvb::cli
