// Reads LongBench v1 data files (THUDM/LongBench data.zip: one JSONL per dataset, "{name}.jsonl",
// LongBench-E as "{name}_e.jsonl") into Samples with the official prompt, max new tokens and
// chat-template flag, optionally middle-truncated to the model's limit (pred.py, docs/benchmarks.md
// §3.3).
#pragma once

#include <string>
#include <vector>

#include "datasets/sample.h"
#include "engine/tokenizer.h"

namespace kvb {

struct LongBenchLoadOptions {
  // With a tokenizer and max_length > 0 the formatted prompt is middle-truncated to max_length
  // tokens (BOS counted) before any chat template, as pred.py does.
  const Tokenizer* tokenizer = nullptr;
  int max_length = 0;
  int limit = -1;  // read at most this many records (-1: all)
};

// `dataset` is a LongBench name, or a LongBench-E name ending in "_e". Throws InputError for a
// missing folder or file or an unknown dataset, FormatError "FILE:LINE: ..." for a malformed
// record.
std::vector<Sample> load_longbench(const std::string& data_dir, const std::string& dataset,
                                   const LongBenchLoadOptions& options = {});

// One record (the parsed JSON object of a data line) as a Sample; `where` names it in errors.
Sample longbench_sample_from_record(const nlohmann::json& record, const std::string& dataset,
                                    const std::string& where,
                                    const LongBenchLoadOptions& options = {});

}  // namespace kvb
