// difflib.SequenceMatcher(None, a, b).ratio() exactly (Ratcliff-Obershelp with CPython's "autojunk"
// rule: when b has at least 200 items, items occurring more than len(b)//100 + 1 times in b are
// "popular" and cannot start a match), and fuzzywuzzy 0.18's fuzz.ratio on top of it. LongBench's
// code_sim uses fuzz.ratio; which backend it gets depends on whether python-Levenshtein is
// installed (docs/benchmarks.md §3.5), so the indel-similarity variant is offered too.
#pragma once

#include "datasets/metrics/py_text.h"

namespace kvb {

// 2*M/T over code points; 1.0 when both are empty (as difflib).
double sequence_matcher_ratio(py::TextView a, py::TextView b);
// python-Levenshtein's ratio: (|a|+|b| - indel distance) / (|a|+|b|) = 2*LCS/T.
double indel_similarity_ratio(py::TextView a, py::TextView b);

enum class FuzzBackend { kDifflib, kLevenshtein };
// fuzz.ratio: equal strings -> 100, then either empty -> 0, else int(round(100*ratio)) with
// round-half-to-even.
int fuzz_ratio(py::TextView a, py::TextView b, FuzzBackend backend = FuzzBackend::kDifflib);

}  // namespace kvb
