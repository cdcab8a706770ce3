// The metric registry the harness calls after generation: one function that scores a prediction
// for any (benchmark, task) with that benchmark's official rule, in [0, 1].
//   longbench:     first-line post-processing where eval.py does it, max over answers of the
//                  dataset's metric (all_classes from the sample)
//   infinitebench: compute_scores.py's scorer for the task, against sample.extra["label"] when
//                  present (the raw label keeps its JSON type), else the references
//   ruler:         postprocess, then string_match_part for qa_1/qa_2, string_match_all otherwise
//   niah:          KVCache-Factory's word recall against the first reference (or the standard
//                  needle answer); the substring match is niah_substring_match
#pragma once

#include <string>
#include <vector>

#include "datasets/sample.h"

namespace kvb {

// Throws InputError for an unknown benchmark or task.
double score_sample(const std::string& benchmark, const std::string& task, const std::string& prediction,
                    const Sample& sample);

// True for RULER tasks scored with string_match_part (qa_1, qa_2, and names starting "qa").
bool ruler_uses_string_match_part(const std::string& task);
// The RULER task names score_sample accepts.
const std::vector<std::string>& ruler_tasks();

}  // namespace kvb
