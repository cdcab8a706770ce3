// InfiniteBench prompts (OpenBMB/InfiniteBench src/prompt.py and eval_utils.py create_prompt;
// docs/benchmarks.md §4.3-4.4): the open-model templates (`yarn_mistral_templates`, also used for
// Yi and ChatGLM3 and by most KV papers; no chat template) and the GPT-4 ones, the per-task max new
// tokens and the truncation limits.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvb {

enum class InfiniteBenchFamily { kOpenModels, kGpt4 };

// "yarn-mistral" (also "open", "yi", "chatglm3") or "gpt4". Throws InputError otherwise.
InfiniteBenchFamily infinitebench_family(const std::string& name);
// DATA_NAME_TO_MAX_NEW_TOKENS.
int infinitebench_max_new_tokens(const std::string& task);
// Middle-truncation limit in tokens: 128*1024 for the open-model scripts, 128000 - 1000 for GPT-4.
int infinitebench_truncation_limit(InfiniteBenchFamily family);

struct InfiniteBenchPrompt {
  std::string context_part;   // template text up to and including the context
  std::string question_part;  // the rest of the template, filled
};

// The prompt of one data record ({"context", "input", "answer", "options", ...}); `where` names the
// record in errors (FormatError when a needed field is missing or malformed).
InfiniteBenchPrompt infinitebench_prompt(const std::string& task, const nlohmann::json& record,
                                         InfiniteBenchFamily family, const std::string& where);

}  // namespace kvb
