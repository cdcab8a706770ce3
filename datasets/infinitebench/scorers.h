// InfiniteBench's per-sample scorers (src/compute_scores.py, get_score_one; docs/benchmarks.md
// §4.5). Labels arrive as the JSON the prediction files carry (string, list, int or float), because
// several scorers depend on the label's Python type.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvb {

// The 12 task names, in compute_scores.py's ALL_TASKS order.
const std::vector<std::string>& infinitebench_tasks();
bool is_infinitebench_task(const std::string& task);

// Score of one prediction in [0, 1]. `model_name` matters only for math_calc ("gpt4" drops the
// first predicted number). Throws InputError for an unknown task or a label of an unusable type.
//
// Where the official code would crash or can never match, this follows docs/benchmarks.md:
// passkey, number_string and kv_retrieval use the first element of a list label; math_find parses a
// string label back into a number and counts a float-looking match against an int label as wrong;
// longbook_choice_eng strips the prediction first and scores an empty one as wrong; a string label
// for the QA tasks is treated as a one-element list.
double infinitebench_score_one(const std::string& task, const std::string& prediction,
                               const nlohmann::json& label, const std::string& model_name = "");

}  // namespace kvb
