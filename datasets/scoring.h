// Scores a prediction for any (benchmark, task) with that benchmark's official rule, in [0, 1]:
// the metric of the benchmark registry (datasets/registry.h; each benchmark's file says which).
#pragma once

#include <string>
#include <vector>

#include "datasets/sample.h"

namespace kvb {

// Throws InputError for an unknown benchmark or task. `prediction` is the answer as scored (NIAH's
// first line already cut: score_answer in datasets/registry.h does both).
double score_sample(const std::string& benchmark, const std::string& task,
                    const std::string& prediction, const Sample& sample);

// RULER's (datasets/ruler/ruler_benchmark.cc): true for the tasks scored with string_match_part
// (qa_1, qa_2, and names starting "qa").
bool ruler_uses_string_match_part(const std::string& task);
// The RULER task names score_sample accepts.
const std::vector<std::string>& ruler_tasks();

}  // namespace kvb
