// Reads InfiniteBench's released data (HF xinrongzhang2022/InfiniteBench: "{task}.jsonl" with id,
// context, input, answer, options) into Samples with the official prompt of a model family,
// max new tokens and optional middle truncation (docs/benchmarks.md §4). The synthetic tasks can
// also be generated (datasets/infinitebench/generate.h); this loader reads any of the 12 files.
#pragma once

#include <string>
#include <vector>

#include "datasets/infinitebench/prompts.h"
#include "datasets/sample.h"
#include "engine/tokenizer.h"

namespace kvb {

struct InfiniteBenchLoadOptions {
  InfiniteBenchFamily family = InfiniteBenchFamily::kOpenModels;
  // With a tokenizer, the whole prompt is middle-truncated to max_length tokens (0: the family's
  // official limit, infinitebench_truncation_limit).
  const Tokenizer* tokenizer = nullptr;
  int max_length = 0;
  int limit = -1;  // read at most this many records (-1: all)
};

std::vector<Sample> load_infinitebench(const std::string& data_dir, const std::string& task,
                                       const InfiniteBenchLoadOptions& options = {});

Sample infinitebench_sample_from_record(const nlohmann::json& record, const std::string& task,
                                        const std::string& where,
                                        const InfiniteBenchLoadOptions& options = {});

// The label compute_scores.py scores against: [answer, "ABCD"[options.index(answer)]] for
// longbook_choice_eng and code_debug, else the raw answer.
nlohmann::json infinitebench_label(const nlohmann::json& record, const std::string& task,
                                   const std::string& where);

}  // namespace kvb
