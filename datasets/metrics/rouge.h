// Two different ROUGE implementations, because the benchmarks use different packages:
//  * LongBench (metrics.py rouge_score) uses the `rouge` package (pltrdy) 1.0.1:
//    Rouge().get_scores([hyp], [ref], avg=True)["rouge-l"]["f"], and 0.0 when it raises.
//    Sentences split on "."; words split on single spaces; case-sensitive; word *sets*
//    (exclusive=True); summary-level union LCS; F = 2*((P*R)/(P+R+1e-8)) (docs/benchmarks.md §3.5).
//  * InfiniteBench En.Sum uses HF evaluate's "rouge" = Google rouge_score's rougeLsum without a
//    stemmer: sentences split on "\n", tokens [a-z0-9]+ after lowercasing, union LCS with per-token
//    budgets, best over references (docs/benchmarks.md §4.5).
#pragma once

#include <vector>

#include "datasets/metrics/py_text.h"

namespace kvb {

// The Python call depth above rouge's recursive LCS read-out when LongBench's eval.py calls
// rouge_score (module -> scorer -> rouge_score); rouge_zh_score adds one frame. Measured with
// CPython 3.11 (limit 1000): a read-out of 991 frames succeeds from rouge_score, 992 raises
// RecursionError, which LongBench turns into a score of 0.
inline constexpr int kRougeMaxReadoutFrames = 991;

// pltrdy rouge-L F (exclusive). `max_readout_frames` models the RecursionError above.
double pltrdy_rouge_l_f(py::TextView hypothesis, py::TextView reference,
                        int max_readout_frames = kRougeMaxReadoutFrames);

// rouge_score's default tokenizer without stemming: lowercase, [^a-z0-9]+ -> space, split, keep
// tokens matching ^[a-z0-9]+$.
std::vector<py::Text> rouge_score_tokenize(py::TextView text);
// Same with NLTK's Porter stemmer on tokens longer than 3 characters (use_stemmer=True).
std::vector<py::Text> rouge_score_tokenize_stemmed(py::TextView text);

struct RougeScore {
  double precision = 0, recall = 0, fmeasure = 0;
};
// rouge_score's rouge1: clipped unigram overlap; P = overlap/max(|prediction|,1), R =
// overlap/max(|target|,1).
RougeScore rouge_score_rouge1(py::TextView target, py::TextView prediction, bool use_stemmer);

// rougeLsum F-measure of one reference against the prediction.
double rouge_lsum_f(py::TextView reference, py::TextView prediction);

}  // namespace kvb
