#include "datasets/longbench/loader.h"

#include "common/errors.h"
#include "datasets/jsonl_reader.h"
#include "datasets/longbench/longbench.h"
#include "datasets/prompt_truncation.h"

namespace kvb {
namespace {

std::string required_string(const nlohmann::json& record, const char* key,
                            const std::string& where) {
  auto it = record.find(key);
  if (it == record.end() || !it->is_string())
    throw FormatError(where + ": LongBench record needs a string field \"" + key + "\"");
  return it->get<std::string>();
}

std::vector<std::string> string_list(const nlohmann::json& record, const char* key,
                                     const std::string& where, bool required) {
  auto it = record.find(key);
  if (it == record.end() || it->is_null()) {
    if (required)
      throw FormatError(where + ": LongBench record needs a list field \"" + key + "\"");
    return {};
  }
  if (!it->is_array())
    throw FormatError(where + ": field \"" + key + "\" must be a list of strings");
  std::vector<std::string> out;
  for (const auto& item : *it) {
    if (!item.is_string())
      throw FormatError(where + ": field \"" + key + "\" must be a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace

Sample longbench_sample_from_record(const nlohmann::json& record, const std::string& dataset_name,
                                    const std::string& where, const LongBenchLoadOptions& options) {
  const LongBenchDataset& dataset = longbench_dataset(dataset_name);
  const std::string context = required_string(record, "context", where);
  const std::string input = required_string(record, "input", where);
  Sample s;
  s.benchmark = "longbench";
  s.task = dataset_name;
  s.id = dataset_name + "/" +
         (record.contains("_id") && record["_id"].is_string() ? record["_id"].get<std::string>()
                                                              : where);
  s.references = string_list(record, "answers", where, /*required=*/true);
  s.all_classes = string_list(record, "all_classes", where, /*required=*/false);
  s.max_new_tokens = dataset.max_new_tokens;
  s.use_chat_template = dataset.uses_chat_template;

  // The question part is what follows {context} in the template; both modes see the same text.
  const std::string full = longbench_format_prompt(dataset, context, input);
  const size_t context_pos = dataset.prompt_template.find("{context}");
  const std::string after_context(dataset.prompt_template.substr(context_pos + 9));
  LongBenchDataset tail_only = dataset;
  tail_only.prompt_template = after_context;
  s.question_part = longbench_format_prompt(tail_only, "", input);
  s.context_part = full.substr(0, full.size() - s.question_part.size());
  if (options.tokenizer && options.max_length > 0) {
    const std::string truncated =
        truncate_middle(*options.tokenizer, full, options.max_length, TailRounding::kSameAsHead);
    if (truncated != full) split_truncated_prompt(truncated, s.context_part, s.question_part);
  }
  s.extra = nlohmann::json::object();
  if (record.contains("length") && record["length"].is_number()) {
    const double length = record["length"].get<double>();  // get<int>() of 1e300 is UB
    if (!(length >= 0 && length <= 2147483647.0))
      throw FormatError(where + ": field \"length\" must be a word count >= 0, not " +
                        record["length"].dump());
    s.extra["length"] = record["length"];
    s.length = static_cast<int>(length);
  }
  if (record.contains("language")) s.extra["language"] = record["language"];
  return s;
}

std::vector<Sample> load_longbench(const std::string& data_dir, const std::string& dataset,
                                   const LongBenchLoadOptions& options) {
  longbench_dataset(dataset);  // unknown names fail before any file access
  return load_jsonl_samples(
      data_dir, dataset, "LongBench",
      "unzip data.zip of the THUDM/LongBench dataset and pass its folder",
      [&](const nlohmann::json& record, const std::string& where) {
        return longbench_sample_from_record(record, dataset, where, options);
      },
      options.limit);
}

}  // namespace kvb
