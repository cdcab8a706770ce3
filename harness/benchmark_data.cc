#include "harness/benchmark_data.h"

#include <algorithm>
#include <fstream>
#include <set>

#include "datasets/infinitebench/generate.h"
#include "datasets/infinitebench/loader.h"
#include "datasets/longbench/loader.h"
#include "datasets/longbench/longbench.h"
#include "datasets/niah/niah.h"
#include "datasets/ruler/ruler.h"
#include "engine/errors.h"
#include "harness/sweep.h"

namespace kvb {
namespace {

// Where the official files come from, for the missing-data messages.
std::string download_hint(const std::string& benchmark) {
  if (benchmark == "longbench")
    return "unzip data.zip of the THUDM/LongBench dataset (one {dataset}.jsonl per dataset) there";
  return "put the task files of the xinrongzhang2022/InfiniteBench dataset ({task}.jsonl) there";
}

const Tokenizer& need_tokenizer(const GroupSampleInputs& inputs, const SampleGroup& group) {
  if (!inputs.tokenizer)
    throw InputError("internal: " + group.benchmark.benchmark + "/" + group.task +
                     " needs the model's tokenizer to fit its samples");
  return *inputs.tokenizer;
}

int frame_tokens(const GroupSampleInputs& inputs) {
  if (!inputs.tokenizer || inputs.frame.empty()) return 0;
  return static_cast<int>(
      inputs.tokenizer->encode(inputs.frame.prefix + inputs.frame.suffix, false, true).size());
}

std::vector<Sample> longbench_samples(const SampleGroup& group, const GroupSampleInputs& inputs) {
  LongBenchLoadOptions options;
  options.tokenizer = inputs.tokenizer;
  options.max_length = inputs.tokenizer ? longbench_prompt_limit(group, inputs) : 0;
  options.limit = group.sample_count;
  const BenchmarkSpec& spec = group.benchmark;
  std::vector<Sample> samples =
      load_longbench(benchmark_data_file(spec, group.task).parent_path().string(), group.task,
                     options);
  for (Sample& s : samples) s.extra["prompt_limit"] = options.max_length;
  return samples;
}

std::vector<Sample> infinitebench_samples(const SampleGroup& group,
                                          const GroupSampleInputs& inputs) {
  const BenchmarkSpec& spec = group.benchmark;
  InfiniteBenchLoadOptions options;
  options.family = infinitebench_family(spec.family);
  if (!loads_from_files(spec, group.task)) {
    // The generators emit records in the released schema; the loader's prompt code does the rest.
    GenerationRequest request{group.task, group.length, group.sample_count, spec.seed, {}};
    const auto records = generate_infinitebench_records(request, need_tokenizer(inputs, group));
    std::vector<Sample> samples;
    for (size_t i = 0; i < records.size(); ++i) {
      Sample sample = infinitebench_sample_from_record(
          records[i], group.task, "generated " + group.task + " record " + std::to_string(i),
          options);
      sample.id = group.task + "/" + std::to_string(group.length) + "/" + std::to_string(i);
      sample.length = group.length;
      sample.extra["seed"] = spec.seed;
      sample.extra["generated"] = true;
      samples.push_back(std::move(sample));
    }
    return samples;
  }
  // A loaded prompt gets the budget a generated one has: length minus the answer's tokens.
  const int prompt_limit = group.length - infinitebench_max_new_tokens(group.task);
  if (prompt_limit < 1)
    throw InputError(spec.key + ".lengths: " + std::to_string(group.length) +
                     " tokens leave no room for an InfiniteBench " + group.task + " prompt (it " +
                     "generates up to " + std::to_string(infinitebench_max_new_tokens(group.task)) +
                     " tokens); use a larger length");
  options.tokenizer = inputs.tokenizer;
  options.max_length = prompt_limit;
  options.limit = group.sample_count;
  std::vector<Sample> samples = load_infinitebench(
      benchmark_data_file(spec, group.task).parent_path().string(), group.task, options);
  for (Sample& s : samples) {
    s.length = group.length;
    s.extra["prompt_limit"] = prompt_limit;
  }
  return samples;
}

}  // namespace

bool loads_from_files(const BenchmarkSpec& spec, const std::string& task) {
  if (spec.benchmark == "longbench") return true;
  if (spec.benchmark != "infinitebench") return false;
  if (!spec.generate) return true;
  const auto& generated = infinitebench_generated_tasks();
  return std::find(generated.begin(), generated.end(), task) == generated.end();
}

std::filesystem::path benchmark_data_file(const BenchmarkSpec& spec, const std::string& task) {
  namespace fs = std::filesystem;
  const std::string key = (spec.key.empty() ? spec.benchmark : spec.key) + ".data_dir";
  std::error_code ec;
  if (spec.data_dir.empty() || !fs::is_directory(spec.data_dir, ec))
    throw InputError("key '" + key + "': " + spec.benchmark + " data folder '" + spec.data_dir +
                     "' does not exist; " + download_hint(spec.benchmark) + ", or set '" + key +
                     "' to the folder that holds them");
  const fs::path file = fs::path(spec.data_dir) / (task + ".jsonl");
  if (!fs::is_regular_file(file, ec))
    throw InputError("key '" + key + "': " + spec.benchmark + " file " + file.string() +
                     " is missing (" + task + " needs " + task + ".jsonl in that folder; " +
                     download_hint(spec.benchmark) + ")");
  return file;
}

int count_data_records(const BenchmarkSpec& spec, const std::string& task) {
  const std::filesystem::path file = benchmark_data_file(spec, task);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError("cannot read " + file.string());
  int records = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r\n\f\v") != std::string::npos) ++records;
  if (records == 0)
    throw InputError("key '" + spec.key + ".data_dir': " + file.string() +
                     " holds no records (expected one JSON object per line)");
  return records;
}

int longbench_prompt_limit(const SampleGroup& group, const GroupSampleInputs& inputs) {
  if (group.length > 0) return group.length;
  if (inputs.model_context <= 0) return 0;
  const LongBenchDataset& dataset = longbench_dataset(group.task);
  const int frame = dataset.uses_chat_template ? frame_tokens(inputs) : 0;
  const int limit = inputs.model_context - dataset.max_new_tokens - frame;
  if (limit < 1)
    throw InputError("the model's context of " + std::to_string(inputs.model_context) +
                     " tokens leaves no room for a LongBench " + group.task + " prompt");
  return limit;
}

void check_group_data(const std::vector<SampleGroup>& groups, const DataSearch& data) {
  const RulerDataPaths paths = ruler_data_paths(data);
  std::set<std::pair<std::string, std::string>> checked;  // (benchmark key, task)
  for (const SampleGroup& group : groups) {
    const BenchmarkSpec& spec = group.benchmark;
    const std::string key = spec.key.empty() ? spec.benchmark : spec.key;
    if (!checked.insert({key, group.task}).second) continue;
    try {
      if (spec.benchmark == "ruler")
        check_ruler_task_data(group.task, paths);
      else if (spec.benchmark == "niah")
        essay_files(paths.essays_dir, "NIAH haystack", paths.searched);
      else if (loads_from_files(spec, group.task))
        benchmark_data_file(spec, group.task);
    } catch (const InputError& e) {
      const std::string message = e.what();
      if (message.rfind("key '", 0) == 0) throw;  // names its key already
      throw InputError("key '" + key + "' (" + spec.benchmark + " " + group.task +
                       ") and the sweep-wide key 'data_dir': " + message);
    }
  }
}

nlohmann::json data_provenance(const std::vector<SampleGroup>& groups, const DataSearch& data) {
  const RulerDataPaths paths = ruler_data_paths(data);
  nlohmann::json out = nlohmann::json::object();
  const auto record = [&](const char* what, const std::filesystem::path& folder) {
    if (!folder.empty()) out[what] = folder.string() + " (" + data_source_label(folder) + ")";
  };
  for (const SampleGroup& group : groups) {
    const std::string& benchmark = group.benchmark.benchmark;
    if (benchmark == "niah" || benchmark == "ruler") record("haystack", paths.essays_dir);
    if (benchmark == "ruler") record("wordlists", paths.wordlists_dir);
    if (loads_from_files(group.benchmark, group.task))
      record(benchmark.c_str(), group.benchmark.data_dir);
  }
  return out;
}

std::vector<Sample> samples_for_group(const SampleGroup& group, const GroupSampleInputs& inputs) {
  const BenchmarkSpec& spec = group.benchmark;
  std::vector<Sample> samples;
  if (spec.benchmark == "ruler") {
    GenerationRequest request{group.task, group.length, spec.samples, spec.seed, {}};
    samples = generate_ruler(request, need_tokenizer(inputs, group), inputs.frame,
                             ruler_data_paths(inputs.data));
  } else if (spec.benchmark == "niah") {
    NiahRequest request;
    request.context_lengths = {group.length};
    request.depths = spec.depths;
    request.essays_dir = ruler_data_paths(inputs.data).essays_dir;
    request.chat_template = spec.chat_template;
    samples = generate_niah(request, need_tokenizer(inputs, group));
  } else if (spec.benchmark == "longbench") {
    samples = longbench_samples(group, inputs);
  } else if (spec.benchmark == "infinitebench") {
    samples = infinitebench_samples(group, inputs);
  } else {
    throw InputError("unknown benchmark '" + spec.benchmark + "'");
  }
  if (samples.empty())
    throw InputError("no samples were generated for " + spec.benchmark + "/" + group.task);
  return samples;
}

}  // namespace kvb
