// LongBench v1's per-answer metrics (LongBench/metrics.py; docs/benchmarks.md §3.5). Each takes
// the (post-processed) prediction and one ground truth; the dataset score is the max over answers.
#pragma once

#include <string>
#include <vector>

#include "datasets/metrics/py_text.h"
#include "datasets/metrics/sequence_matcher.h"

namespace kvb {

// classification_score: classes occurring in the prediction, then CPython's remove-while-iterating
// walk that drops classes that are proper substrings of the ground truth (skipping the element
// after each removal), then 1/|list| if the ground truth is in the list.
double classification_score(py::TextView prediction, py::TextView ground_truth,
                            const std::vector<py::Text>& all_classes);
// retrieval_score / retrieval_zh_score: share of \d+ runs in the prediction equal to the id of
// "Paragraph N" / "段落N" in the ground truth. Throws InputError when the ground truth has no id
// (Python raises IndexError there).
double retrieval_score(py::TextView prediction, py::TextView ground_truth);
double retrieval_zh_score(py::TextView prediction, py::TextView ground_truth);
// count_score: share of \d+ runs equal to the ground truth.
double count_score(py::TextView prediction, py::TextView ground_truth);
// code_sim_score: first line (after leading "\n"s) without "`", "#" or "//", fuzz.ratio/100.
double code_sim_score(py::TextView prediction, py::TextView ground_truth,
                      FuzzBackend backend = FuzzBackend::kDifflib);
// rouge_score: pltrdy rouge-L F, 0 on any exception.
double longbench_rouge_score(py::TextView prediction, py::TextView ground_truth);
// rouge_zh_score: jieba-segment both, join with spaces, rouge_score (one frame deeper).
double longbench_rouge_zh_score(py::TextView prediction, py::TextView ground_truth);

}  // namespace kvb
