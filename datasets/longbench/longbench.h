// LongBench v1 (THUDM/LongBench, LongBench/ at 2e00731): the 21 datasets with their prompt
// templates (config/dataset2prompt.json), max new tokens (config/dataset2maxlen.json), metric,
// category and the chat-template skip list (pred.py), and the scoring loop of eval.py
// (docs/benchmarks.md §3).
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/metrics/sequence_matcher.h"

namespace kvb {

struct LongBenchDataset {
  std::string_view name;
  std::string_view
      category;  // Single-Doc QA, Multi-Doc QA, Summarization, Few-shot, Synthetic, Code
  std::string_view language;  // en, zh, code
  std::string_view metric;    // qa_f1, qa_f1_zh, rouge, rouge_zh, classification, retrieval,
                              // retrieval_zh, count, code_sim
  int max_new_tokens;         // dataset2maxlen.json
  bool uses_chat_template;    // false for trec, triviaqa, samsum, lsht, lcc, repobench-p (pred.py)
  bool first_line_only;       // eval.py keeps the first line for trec, triviaqa, samsum, lsht
  std::string_view prompt_template;  // dataset2prompt.json, byte for byte
};

std::span<const LongBenchDataset> longbench_datasets();
// Accepts a LongBench-E name ("qasper_e") too. Throws InputError listing the known names.
const LongBenchDataset& longbench_dataset(std::string_view name);
bool is_longbench_e_name(std::string_view name);  // ends in "_e" and names a LongBench-E dataset
// The 16 English and code datasets of the KV-cache papers, and the 13 of LongBench-E.
const std::vector<std::string>& longbench_kv_paper_datasets();
const std::vector<std::string>& longbench_e_datasets();
// config/model2maxlen.json (official max_length per model); nullopt for other names.
std::optional<int> longbench_model_max_length(std::string_view model_name);

// prompt_format.format(**record) for these templates: "{context}" and "{input}" replaced in one
// pass (substituted text is not searched again).
std::string longbench_format_prompt(const LongBenchDataset& dataset, std::string_view context,
                                    std::string_view input);

// eval.py: first line after leading newlines for the four few-shot datasets, else unchanged.
std::string longbench_postprocess(const LongBenchDataset& dataset, std::string_view prediction);
// metric(prediction, ground_truth, all_classes) of dataset2metric.
// `code_sim_backend` picks what fuzz.ratio runs on (difflib, as LongBench's requirements install).
double longbench_metric(const LongBenchDataset& dataset, std::string_view prediction,
                        std::string_view ground_truth, const std::vector<std::string>& all_classes,
                        FuzzBackend code_sim_backend = FuzzBackend::kDifflib);
// One sample: post-process, then the max of the metric over the answers (0 when there are none).
double longbench_score_sample(const LongBenchDataset& dataset, std::string_view prediction,
                              const std::vector<std::string>& answers,
                              const std::vector<std::string>& all_classes,
                              FuzzBackend code_sim_backend = FuzzBackend::kDifflib);

// Python's round(x, 2): half to even on the exact binary value.
double python_round2(double x);
// LongBench-E bucket of a record's `length`: "0-4k" (< 4000), "4-8k" (< 8000), "8k+".
std::string longbench_length_bucket(double length);

// The KV-paper "Avg.": plain mean of the dataset scores given.
double longbench_dataset_average(const std::map<std::string, double>& scores);
// The leaderboard "Avg": mean over categories of the mean of that category's datasets, for
// language "en" (English datasets + code) or "zh" (Chinese datasets + code). Categories with no
// dataset in `scores` are left out. Throws InputError if no category is present.
double longbench_category_average(const std::map<std::string, double>& scores,
                                  std::string_view language);
// The per-category means used by longbench_category_average.
std::map<std::string, double> longbench_category_means(const std::map<std::string, double>& scores,
                                                       std::string_view language);

}  // namespace kvb
