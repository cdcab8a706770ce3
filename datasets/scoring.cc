#include "datasets/scoring.h"

#include <algorithm>

#include "datasets/infinitebench/scorers.h"
#include "datasets/longbench/longbench.h"
#include "datasets/metrics/string_match.h"
#include "engine/errors.h"

namespace kvb {
namespace {

std::vector<py::Text> to_texts(const std::vector<std::string>& strings) {
  std::vector<py::Text> out;
  for (const auto& s : strings) out.push_back(py::T(s));
  return out;
}

}  // namespace

bool ruler_uses_string_match_part(const std::string& task) { return task.rfind("qa", 0) == 0; }

const std::vector<std::string>& ruler_tasks() {
  // scripts/synthetic.yaml, plus the long names of the three non-NIAH synthetic tasks.
  static const std::vector<std::string> tasks = {
      "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
      "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2",
      "variable_tracking", "common_words_extraction", "freq_words_extraction"};
  return tasks;
}

double score_sample(const std::string& benchmark, const std::string& task, const std::string& prediction,
                    const Sample& sample) {
  if (benchmark == "longbench") {
    return longbench_score_sample(longbench_dataset(task), prediction, sample.references, sample.all_classes);
  }
  if (benchmark == "infinitebench") {
    if (sample.extra.is_object() && sample.extra.contains("label"))
      return infinitebench_score_one(task, prediction, sample.extra["label"]);
    return infinitebench_score_one(task, prediction, nlohmann::json(sample.references));
  }
  if (benchmark == "ruler") {
    const auto& tasks = ruler_tasks();
    if (std::find(tasks.begin(), tasks.end(), task) == tasks.end()) {
      std::string known;
      for (const auto& t : tasks) known += (known.empty() ? "" : ", ") + t;
      throw InputError("unknown RULER task '" + task + "' (known: " + known + ")");
    }
    const py::Text pred = ruler_postprocess(py::T(prediction));
    const auto refs = to_texts(sample.references);
    return ruler_uses_string_match_part(task) ? string_match_part(pred, refs) : string_match_all(pred, refs);
  }
  if (benchmark == "niah") {
    const py::Text expected = sample.references.empty() ? py::Text(kNiahExpectedAnswer) : py::T(sample.references[0]);
    return niah_word_recall(py::T(prediction), expected);
  }
  throw InputError("unknown benchmark '" + benchmark + "' (known: longbench, infinitebench, ruler, niah)");
}

}  // namespace kvb
