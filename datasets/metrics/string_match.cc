#include "datasets/metrics/string_match.h"

#include <set>

#include "datasets/metrics/rouge.h"

namespace kvb {

py::Text ruler_postprocess(py::TextView prediction) {
  py::Text text = py::strip(prediction);
  for (char32_t& c : text)
    if (c < 0x20) c = U'\n';
  return py::strip(text);
}

double string_match_all(py::TextView prediction, const std::vector<py::Text>& references) {
  if (references.empty()) return 0.0;
  const py::Text pred = py::lower(prediction);
  size_t found = 0;
  for (const auto& r : references) found += py::contains(pred, py::lower(r)) ? 1 : 0;
  return static_cast<double>(found) / static_cast<double>(references.size());
}

double string_match_part(py::TextView prediction, const std::vector<py::Text>& references) {
  const py::Text pred = py::lower(prediction);
  for (const auto& r : references)
    if (py::contains(pred, py::lower(r))) return 1.0;
  return 0.0;
}

double niah_word_recall(py::TextView prediction, py::TextView expected) {
  const auto expected_words = py::split_whitespace(py::lower(expected));
  const std::set<py::Text> wanted(expected_words.begin(), expected_words.end());
  if (wanted.empty()) return 0.0;
  const auto words = py::split_whitespace(py::lower(prediction));
  const std::set<py::Text> got(words.begin(), words.end());
  size_t common = 0;
  for (const auto& w : wanted) common += got.count(w);
  return static_cast<double>(common) / static_cast<double>(wanted.size());
}

double niah_substring_match(py::TextView prediction, py::TextView expected) {
  return py::contains(py::lower(prediction), py::lower(py::strip(expected))) ? 1.0 : 0.0;
}

double niah_rouge1_f_times_10(py::TextView prediction, py::TextView needle) {
  if (py::strip(prediction).empty()) return 0.0;
  return rouge_score_rouge1(needle, prediction, /*use_stemmer=*/true).fmeasure * 10;
}

}  // namespace kvb
