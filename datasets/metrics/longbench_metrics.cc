#include "datasets/metrics/longbench_metrics.h"

#include <algorithm>

#include "common/errors.h"
#include "datasets/metrics/jieba.h"
#include "datasets/metrics/rouge.h"

namespace kvb {
namespace {

double share_of_runs_equal_to(py::TextView prediction, py::TextView wanted) {
  const auto numbers = py::find_digit_runs(prediction);
  if (numbers.empty()) return 0.0;
  const auto right = std::count(numbers.begin(), numbers.end(), py::Text(wanted));
  return static_cast<double>(right) / static_cast<double>(numbers.size());
}

// The first match of `label`(\d+) in the ground truth, e.g. "Paragraph 12" -> "12".
py::Text paragraph_id(py::TextView ground_truth, py::TextView label) {
  size_t from = 0;
  while (true) {
    const size_t pos = ground_truth.find(label, from);
    if (pos == py::TextView::npos) break;
    size_t end = pos + label.size();
    while (end < ground_truth.size() && py::is_decimal_digit(ground_truth[end])) ++end;
    if (end > pos + label.size())
      return py::Text(ground_truth.substr(pos + label.size(), end - pos - label.size()));
    from = pos + 1;
  }
  throw InputError("LongBench retrieval answer '" + py::to_utf8(ground_truth) + "' has no '" +
                   py::to_utf8(label) + "<number>' (the official scorer fails on it too)");
}

}  // namespace

double classification_score(py::TextView prediction, py::TextView ground_truth,
                            const std::vector<py::Text>& all_classes) {
  std::vector<py::Text> matches;
  for (const auto& name : all_classes)
    if (py::contains(prediction, name)) matches.push_back(name);
  // `for match_term in em_match_list: ... em_match_list.remove(match_term)`: the list iterator
  // advances by index, so the element that slides into the removed slot is skipped; list.remove
  // deletes the first equal element (the same one here unless a class is listed twice).
  for (size_t index = 0; index < matches.size(); ++index) {
    const py::Text term = matches[index];
    if (py::contains(ground_truth, term) && term != ground_truth)
      matches.erase(std::find(matches.begin(), matches.end(), term));
  }
  if (std::find(matches.begin(), matches.end(), py::Text(ground_truth)) == matches.end())
    return 0.0;
  return 1.0 / static_cast<double>(matches.size());
}

double retrieval_score(py::TextView prediction, py::TextView ground_truth) {
  return share_of_runs_equal_to(prediction, paragraph_id(ground_truth, U"Paragraph "));
}

double retrieval_zh_score(py::TextView prediction, py::TextView ground_truth) {
  return share_of_runs_equal_to(prediction, paragraph_id(ground_truth, U"段落"));
}

double count_score(py::TextView prediction, py::TextView ground_truth) {
  return share_of_runs_equal_to(prediction, ground_truth);
}

double code_sim_score(py::TextView prediction, py::TextView ground_truth, FuzzBackend backend) {
  py::Text line;
  for (const auto& candidate : py::split(py::lstrip_chars(prediction, U"\n"), U"\n")) {
    if (!py::contains(candidate, U"`") && !py::contains(candidate, U"#") &&
        !py::contains(candidate, U"//")) {
      line = candidate;
      break;
    }
  }
  return fuzz_ratio(line, ground_truth, backend) / 100.0;
}

double longbench_rouge_score(py::TextView prediction, py::TextView ground_truth) {
  return pltrdy_rouge_l_f(prediction, ground_truth, kRougeMaxReadoutFrames);
}

double longbench_rouge_zh_score(py::TextView prediction, py::TextView ground_truth) {
  const JiebaSegmenter& jieba = JiebaSegmenter::shared();
  const py::Text pred = py::join(jieba.cut(prediction), U" ");
  const py::Text truth = py::join(jieba.cut(ground_truth), U" ");
  return pltrdy_rouge_l_f(pred, truth, kRougeMaxReadoutFrames - 1);
}

}  // namespace kvb
