// InfiniteBench synthetic task generators (OpenBMB/InfiniteBench
// data/construct_synthetic_dataset.py and the released files' layout; docs/benchmarks.md §4.2):
// passkey, number_string, kv_retrieval, math_find. They emit records in the released schema ({"id",
// "context", "input", "answer", "options"}), so the loader's prompt code
// (datasets/infinitebench/loader.h) turns them into Samples exactly as it does the downloaded
// files.
//
// Sizes: the release is fixed near 128K tokens (passkey/number_string 5220 noise lines, kv 2500
// pairs, math_find 60000 numbers). For --length L the haystack size is the largest for which the
// record's context + input, counted with the model tokenizer, plus kInfiniteBenchPromptReserve
// template tokens and the task's max new tokens, fits in L.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/generation.h"

namespace kvb {

inline constexpr int kInfiniteBenchPromptReserve = 64;

const std::vector<std::string>& infinitebench_generated_tasks();

// Records for request.task at request.length tokens; InputError for a task that is not generated.
std::vector<nlohmann::json> generate_infinitebench_records(const GenerationRequest& request,
                                                           const Tokenizer& tokenizer,
                                                           const ProgressFn& progress = nullptr);

}  // namespace kvb
