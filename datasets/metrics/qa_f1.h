// Token F1 as in LongBench's metrics.py and InfiniteBench's compute_scores.py (the SQuAD recipe):
// normalise, split, multiset overlap, F1 = 2PR/(P+R), 0 when nothing overlaps.
#pragma once

#include <vector>

#include "datasets/metrics/py_text.h"

namespace kvb {

class JiebaSegmenter;

// normalize_answer: lower, drop string.punctuation, replace \b(a|an|the)\b with " ", collapse
// whitespace.
py::Text normalize_answer(py::TextView text);
// normalize_zh_answer: lower, drop ASCII punctuation and the Chinese punctuation list of
// metrics.py, remove all whitespace.
py::Text normalize_zh_answer(py::TextView text);

double token_f1(const std::vector<py::Text>& prediction, const std::vector<py::Text>& ground_truth);

// LongBench qa_f1_score / InfiniteBench qa_f1_score for one ground truth.
double qa_f1_score(py::TextView prediction, py::TextView ground_truth);
// LongBench qa_f1_zh_score: jieba tokens, each normalised, empties dropped.
double qa_f1_zh_score(py::TextView prediction, py::TextView ground_truth,
                      const JiebaSegmenter& jieba);
// InfiniteBench longbook_qa_chn: one token per character of normalize_zh_answer (no jieba).
double char_f1_zh_score(py::TextView prediction, py::TextView ground_truth);

}  // namespace kvb
