// RULER's metrics (scripts/eval/synthetic/constants.py, evaluate.py) and the NIAH scores used by
// KV-cache papers (docs/benchmarks.md §1.3, §2.3).
#pragma once

#include <string>
#include <vector>

#include "datasets/metrics/py_text.h"

namespace kvb {

// evaluate.py's postprocess_pred: strip, every character in \x00-\x1f becomes "\n", strip again.
py::Text ruler_postprocess(py::TextView prediction);
// string_match_all: share of references r with r.lower() in pred.lower().
double string_match_all(py::TextView prediction, const std::vector<py::Text>& references);
// string_match_part: 1 if any reference (lowercased) is in the lowercased prediction.
double string_match_part(py::TextView prediction, const std::vector<py::Text>& references);

// KVCache-Factory's NIAH heatmap score (scripts/scripts_needle/visualize.py): the share of the
// distinct lowercased whitespace-split words of `expected` that occur among the prediction's
// words, in [0, 1].
double niah_word_recall(py::TextView prediction, py::TextView expected);
// Whether the expected answer occurs in the prediction, case-insensitively.
double niah_substring_match(py::TextView prediction, py::TextView expected);
// KVCache-Factory's stored NIAH score (run_needle_in_haystack.py): rouge_score's ROUGE-1 F-measure
// with the Porter stemmer, target = needle, prediction = response, times 10 (0-10).
double niah_rouge1_f_times_10(py::TextView prediction, py::TextView needle);
// The standard needle itself is kNiahNeedle of datasets/niah/niah.h.
// The answer part of the standard NIAH needle that visualize.py compares against.
inline constexpr std::u32string_view kNiahExpectedAnswer =
    U"eat a sandwich and sit in Dolores Park on a sunny day.";

}  // namespace kvb
