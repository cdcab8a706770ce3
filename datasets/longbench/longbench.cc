#include "datasets/longbench/longbench.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/errors.h"
#include "datasets/longbench/longbench_table.h"
#include "datasets/metrics/jieba.h"
#include "datasets/metrics/longbench_metrics.h"
#include "datasets/metrics/qa_f1.h"
#include "datasets/text_utils.h"

namespace kvb {

std::span<const LongBenchDataset> longbench_datasets() { return kLongBenchDatasets; }

bool is_longbench_e_name(std::string_view name) {
  if (name.size() < 3 || name.substr(name.size() - 2) != "_e") return false;
  const std::string base(name.substr(0, name.size() - 2));
  for (const auto& d : longbench_e_datasets())
    if (d == base) return true;
  return false;
}

const LongBenchDataset& longbench_dataset(std::string_view name) {
  const std::string_view base = is_longbench_e_name(name) ? name.substr(0, name.size() - 2) : name;
  for (const auto& d : longbench_datasets())
    if (d.name == base) return d;
  std::string known;
  for (const auto& d : longbench_datasets())
    known += (known.empty() ? "" : ", ") + std::string(d.name);
  throw InputError("unknown LongBench dataset '" + std::string(name) + "' (known: " + known +
                   "; LongBench-E names add \"_e\")");
}

const std::vector<std::string>& longbench_kv_paper_datasets() {
  static const std::vector<std::string> names = {"narrativeqa",
                                                 "qasper",
                                                 "multifieldqa_en",
                                                 "hotpotqa",
                                                 "2wikimqa",
                                                 "musique",
                                                 "gov_report",
                                                 "qmsum",
                                                 "multi_news",
                                                 "trec",
                                                 "triviaqa",
                                                 "samsum",
                                                 "passage_count",
                                                 "passage_retrieval_en",
                                                 "lcc",
                                                 "repobench-p"};
  return names;
}

const std::vector<std::string>& longbench_e_datasets() {
  static const std::vector<std::string> names = {"qasper",
                                                 "multifieldqa_en",
                                                 "hotpotqa",
                                                 "2wikimqa",
                                                 "gov_report",
                                                 "multi_news",
                                                 "trec",
                                                 "triviaqa",
                                                 "samsum",
                                                 "passage_count",
                                                 "passage_retrieval_en",
                                                 "lcc",
                                                 "repobench-p"};
  return names;
}

std::optional<int> longbench_model_max_length(std::string_view model_name) {
  // LongBench/config/model2maxlen.json.
  static const std::map<std::string, int, std::less<>> table = {
      {"llama2-7b-chat-4k", 3500}, {"longchat-v1.5-7b-32k", 31500}, {"xgen-7b-8k", 7500},
      {"internlm-7b-8k", 7500},    {"chatglm2-6b", 31500},          {"chatglm2-6b-32k", 31500},
      {"chatglm3-6b-32k", 31500},  {"vicuna-v1.5-7b-16k", 15500}};
  auto it = table.find(model_name);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

std::string longbench_format_prompt(const LongBenchDataset& dataset, std::string_view context,
                                    std::string_view input) {
  return format_template(std::string(dataset.prompt_template),
                         {{"context", std::string(context)}, {"input", std::string(input)}});
}

std::string longbench_postprocess(const LongBenchDataset& dataset, std::string_view prediction) {
  if (!dataset.first_line_only) return std::string(prediction);
  size_t start = 0;
  while (start < prediction.size() && prediction[start] == '\n') ++start;
  const size_t end = prediction.find('\n', start);
  return std::string(prediction.substr(
      start, end == std::string_view::npos ? std::string_view::npos : end - start));
}

double longbench_metric(const LongBenchDataset& dataset, std::string_view prediction,
                        std::string_view ground_truth, const std::vector<std::string>& all_classes,
                        FuzzBackend code_sim_backend) {
  const py::Text pred = py::T(prediction);
  const py::Text truth = py::T(ground_truth);
  const std::string_view m = dataset.metric;
  if (m == "qa_f1") return qa_f1_score(pred, truth);
  if (m == "qa_f1_zh") return qa_f1_zh_score(pred, truth, JiebaSegmenter::shared());
  if (m == "rouge") return longbench_rouge_score(pred, truth);
  if (m == "rouge_zh") return longbench_rouge_zh_score(pred, truth);
  if (m == "classification") {
    std::vector<py::Text> classes;
    for (const auto& c : all_classes) classes.push_back(py::T(c));
    return classification_score(pred, truth, classes);
  }
  if (m == "retrieval") return retrieval_score(pred, truth);
  if (m == "retrieval_zh") return retrieval_zh_score(pred, truth);
  if (m == "count") return count_score(pred, truth);
  if (m == "code_sim") return code_sim_score(pred, truth, code_sim_backend);
  throw InputError("internal: LongBench metric '" + std::string(m) + "' has no implementation");
}

double longbench_score_sample(const LongBenchDataset& dataset, std::string_view prediction,
                              const std::vector<std::string>& answers,
                              const std::vector<std::string>& all_classes,
                              FuzzBackend code_sim_backend) {
  const std::string pred = longbench_postprocess(dataset, prediction);
  double score = 0.0;
  for (const auto& truth : answers)
    score = std::max(score, longbench_metric(dataset, pred, truth, all_classes, code_sim_backend));
  return score;
}

double python_round2(double x) {
  if (!std::isfinite(x)) return x;
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.2f",
                x);  // correctly rounded, ties to even on the exact value
  return std::strtod(buffer, nullptr);
}

std::string longbench_length_bucket(double length) {
  if (length < 4000) return "0-4k";
  if (length < 8000) return "4-8k";
  return "8k+";
}

double longbench_dataset_average(const std::map<std::string, double>& scores) {
  if (scores.empty()) throw InputError("no LongBench dataset scores to average");
  double sum = 0;
  for (const auto& [name, score] : scores) sum += score;
  return sum / static_cast<double>(scores.size());
}

std::map<std::string, double> longbench_category_means(const std::map<std::string, double>& scores,
                                                       std::string_view language) {
  if (language != "en" && language != "zh")
    throw InputError("LongBench category average: language must be 'en' or 'zh', not '" +
                     std::string(language) + "'");
  std::map<std::string, std::pair<double, int>> sums;
  for (const auto& [name, score] : scores) {
    const LongBenchDataset& d = longbench_dataset(name);
    if (d.language != language && d.language != "code") continue;
    auto& [sum, count] = sums[std::string(d.category)];
    sum += score;
    ++count;
  }
  std::map<std::string, double> means;
  for (const auto& [category, sum_count] : sums)
    means[category] = sum_count.first / sum_count.second;
  return means;
}

double longbench_category_average(const std::map<std::string, double>& scores,
                                  std::string_view language) {
  const auto means = longbench_category_means(scores, language);
  if (means.empty())
    throw InputError("no LongBench dataset of language '" + std::string(language) + "' to average");
  double sum = 0;
  for (const auto& [category, mean] : means) sum += mean;
  return sum / static_cast<double>(means.size());
}

}  // namespace kvb
