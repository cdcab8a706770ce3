#include "datasets/infinitebench/loader.h"

#include "common/errors.h"
#include "datasets/infinitebench/scorers.h"
#include "datasets/jsonl_reader.h"
#include "datasets/prompt_truncation.h"

namespace kvb {

nlohmann::json infinitebench_label(const nlohmann::json& record, const std::string& task,
                                   const std::string& where) {
  auto answer = record.find("answer");
  if (answer == record.end()) throw FormatError(where + ": InfiniteBench record has no \"answer\"");
  if (task != "longbook_choice_eng" && task != "code_debug") return *answer;
  const nlohmann::json text = answer->is_array() && !answer->empty() ? (*answer)[0] : *answer;
  auto options = record.find("options");
  if (!text.is_string() || options == record.end() || !options->is_array())
    throw FormatError(where + ": " + task + " needs a string answer and a list of options");
  for (size_t k = 0; k < options->size() && k < 4; ++k)
    if ((*options)[k] == text)
      return nlohmann::json::array({text, std::string(1, static_cast<char>('A' + k))});
  throw FormatError(where + ": " + task + " answer " + text.dump() + " is not one of the options");
}

Sample infinitebench_sample_from_record(const nlohmann::json& record, const std::string& task,
                                        const std::string& where,
                                        const InfiniteBenchLoadOptions& options) {
  Sample s;
  s.benchmark = "infinitebench";
  s.task = task;
  s.id = task + "/" +
         (record.contains("id")
              ? (record["id"].is_string() ? record["id"].get<std::string>() : record["id"].dump())
              : where);
  const InfiniteBenchPrompt prompt = infinitebench_prompt(task, record, options.family, where);
  s.context_part = prompt.context_part;
  s.question_part = prompt.question_part;
  s.max_new_tokens = infinitebench_max_new_tokens(task);
  s.use_chat_template =
      options.family == InfiniteBenchFamily::kGpt4;  // the open-model scripts send raw text
  const nlohmann::json label = infinitebench_label(record, task, where);
  s.extra = nlohmann::json{{"label", label}};
  const nlohmann::json as_list = label.is_array() ? label : nlohmann::json::array({label});
  for (const auto& item : as_list)
    s.references.push_back(item.is_string() ? item.get<std::string>() : item.dump());
  if (options.tokenizer) {
    const int limit = options.max_length > 0 ? options.max_length
                                             : infinitebench_truncation_limit(options.family);
    const std::string full = s.context_part + s.question_part;
    const std::string truncated =
        truncate_middle(*options.tokenizer, full, limit, TailRounding::kPythonFloor);
    if (truncated != full) split_truncated_prompt(truncated, s.context_part, s.question_part);
  }
  return s;
}

std::vector<Sample> load_infinitebench(const std::string& data_dir, const std::string& task,
                                       const InfiniteBenchLoadOptions& options) {
  if (!is_infinitebench_task(task))
    infinitebench_max_new_tokens(task);  // throws the unknown-task error
  return load_jsonl_samples(
      data_dir, task, "InfiniteBench",
      "download the task files of the xinrongzhang2022/InfiniteBench dataset and pass their folder",
      [&](const nlohmann::json& record, const std::string& where) {
        return infinitebench_sample_from_record(record, task, where, options);
      },
      options.limit);
}

}  // namespace kvb
