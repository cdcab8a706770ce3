// One benchmark sample, as every generator and loader produces it and the runner consumes it.
// The prompt is kept in parts so that both prompt modes can be built from one sample:
//   query-aware:        chat(context_part + question_part) + answer_prefix, compressed as a whole
//   question-agnostic:  context_part compressed alone, then question_part + answer_prefix appended
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvb {

struct Sample {
  std::string id;             // unique within (benchmark, task), e.g. "niah_single_1/4096/7"
  std::string benchmark;      // ruler | niah | longbench | infinitebench
  std::string task;           // e.g. niah_single_1, vt, qasper, passkey
  std::string context_part;   // the user message up to (not including) the question
  std::string question_part;  // the rest of the user message (may be empty)
  std::string answer_prefix;  // appended after the chat template's assistant header (RULER)
  std::vector<std::string> references;   // gold answers
  std::vector<std::string> all_classes;  // LongBench classification labels (else empty)
  int max_new_tokens = 32;
  int length = 0;                 // target context length in tokens (generator) or measured length
  double depth = -1;              // NIAH needle depth in percent, -1 when not applicable
  bool use_chat_template = true;  // false for LongBench's skip-list datasets
  nlohmann::json extra;           // benchmark-specific fields (e.g. LongBench "length")

  std::string full_user_message() const { return context_part + question_part; }
};

void to_json(nlohmann::json& out, const Sample& sample);
void from_json(const nlohmann::json& in, Sample& sample);

}  // namespace kvb
