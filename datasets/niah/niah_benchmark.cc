// Needle in a Haystack, KVCache-Factory's protocol (docs/benchmarks.md §2): one generated sample
// per (length, depth), the Paul Graham essays as haystack; the answer is the first non-blank line
// of the generated text and scores word recall against the expected answer; the substring match is
// recorded beside it. Rows feed the depth x length heatmaps. Predictions files:
// {"pred"|"prediction"|"response", "answers"|"references"|"outputs"?, "needle"?}, scored with word
// recall and reporting the substring match and the ROUGE-1 F x10 that KVCache-Factory stores.
#include <algorithm>
#include <cctype>

#include "common/errors.h"
#include "datasets/metrics/string_match.h"
#include "datasets/niah/niah.h"
#include "datasets/prediction_records.h"
#include "datasets/registry.h"
#include "datasets/ruler/ruler.h"

namespace kvb {
namespace {

// KVCache-Factory stops generation at "\n". kvbench cuts the text instead: small models often
// open with a newline, which as a stop token would end the answer before it began. The first
// non-blank line is what a newline stop yields once the answer has started.
std::string first_answer_line(const std::string& generated, const Sample& sample) {
  if (!sample.extra.value("stop_at_newline", false)) return generated;
  const size_t begin = generated.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  std::string line = generated.substr(begin);
  const size_t end = line.find('\n');
  if (end != std::string::npos) line.resize(end);
  return line;
}

// Case-insensitive (ASCII) containment of the sample's substring answer.
nlohmann::json substring_match(const std::string& answer, const Sample& sample) {
  nlohmann::json metrics = nlohmann::json::object();
  if (!sample.extra.contains("substring_answer")) return metrics;
  std::string lower = answer;
  std::string expected = sample.extra["substring_answer"].get<std::string>();
  for (auto* s : {&lower, &expected})
    std::transform(s->begin(), s->end(), s->begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  metrics["substring_match"] = lower.find(expected) != std::string::npos;
  return metrics;
}

// The heatmap score: recall of the expected answer's words (the sample's first reference).
py::Text expected_answer(const Sample& sample) {
  return sample.references.empty() ? py::Text(kNiahExpectedAnswer) : py::T(sample.references[0]);
}

double word_recall(const std::string&, const std::string& answer, const Sample& sample) {
  return niah_word_recall(py::T(answer), expected_answer(sample));
}

// The three NIAH scores of every record, each a mean over the file.
FileScores score_file(const std::string& task, const std::string& path, const FileScoreOptions&) {
  std::vector<double> recall, substring, rouge1_f10;
  for_each_prediction_record(path, [&](const nlohmann::json& record, size_t line) {
    const std::string pred = prediction_of(record, {"pred", "prediction", "response"}, path, line);
    Sample sample;
    sample.benchmark = "niah";
    sample.task = task;
    if (const nlohmann::json* references =
            first_field(record, {"outputs", "answers", "references"}))
      sample.references = strings_of(*references, path, line, "the references");
    recall.push_back(word_recall(task, pred, sample));
    substring.push_back(niah_substring_match(py::T(pred), expected_answer(sample)));
    const nlohmann::json* needle = first_field(record, {"needle"});
    rouge1_f10.push_back(niah_rouge1_f_times_10(py::T(pred), needle && needle->is_string()
                                                                 ? py::T(needle->get<std::string>())
                                                                 : py::T(kNiahNeedle)));
  });
  FileScores scores;
  scores.per_record = recall;
  scores.percent = percent_of_mean(recall);
  scores.reported = {
      {"substring_match", "substring match", percent_of_mean(substring)},
      {"rouge1_f10", "ROUGE-1 F x10 (stored KVCache-Factory score)", rounded_mean(rouge1_f10)}};
  return scores;
}

}  // namespace

Benchmark niah_benchmark() {
  Benchmark b;
  b.name = "niah";
  b.title = "NIAH";
  b.source = "gkamradt/LLMTest_NeedleInAHaystack; KVCache-Factory run_needle_in_haystack.py";
  b.option_keys = {"depths", "template"};
  b.default_tasks = {"niah"};
  b.layout = TableLayout::kDepthGrid;
  b.table_tasks = {"niah"};
  b.complete_spec = [](BenchmarkSpec& spec) {
    if (spec.depths.empty()) spec.depths = {0, 25, 50, 75, 100};
  };
  b.check_task = [](const std::string& task) {
    if (task != "niah") throw InputError("NIAH has one task, 'niah'; got '" + task + "'");
  };
  b.check_generator_data = [](const std::string&, const DataSearch& data) {
    const RulerDataPaths paths = ruler_data_paths(data);
    essay_files(paths.essays_dir, "NIAH haystack", paths.searched);
  };
  b.generator_folders = [](const DataSearch& data) {
    return std::vector<std::pair<std::string, std::filesystem::path>>{
        {"haystack", ruler_data_paths(data).essays_dir}};
  };
  b.samples = [](const TaskGroup& group, const GroupSampleInputs& inputs) {
    NiahRequest request;
    request.context_lengths = {group.length};
    request.depths = group.spec.depths;
    request.essays_dir = ruler_data_paths(inputs.data).essays_dir;
    request.chat_template = group.spec.chat_template;
    return generate_niah(request, group_tokenizer(group, inputs), inputs.progress);
  };
  b.answer = first_answer_line;
  b.score = word_recall;
  b.extra_metrics = substring_match;
  b.score_file = score_file;
  // gen-data --num K: KVCache-Factory's depth grid round(linspace(0, 100, K)), default 10.
  b.set_generated_count = [](BenchmarkSpec& spec, int count) {
    spec.depths = niah_depths(count);
    spec.samples = 1;
  };
  b.generated_count_default = 10;
  return b;
}

}  // namespace kvb
