// LongBench v1 (docs/benchmarks.md §3): samples loaded from the official "{dataset}.jsonl" files,
// prompts middle-truncated as pred.py does (to the config's length, or the model's context minus
// the dataset's answer and the chat frame); eval.py's metric per dataset. The table groups the
// datasets by category.
#include "datasets/longbench/loader.h"
#include "datasets/longbench/longbench.h"
#include "datasets/registry.h"
#include "engine/errors.h"

namespace kvb {
namespace {

int frame_tokens(const GroupSampleInputs& inputs) {
  if (!inputs.tokenizer || inputs.frame.empty()) return 0;
  return static_cast<int>(
      inputs.tokenizer->encode(inputs.frame.prefix + inputs.frame.suffix, false, true).size());
}

// pred.py's max_length: the group's length when set, else the model's context minus the dataset's
// max new tokens and the chat frame's tokens; 0 means no truncation (context unknown).
int prompt_limit(const TaskGroup& group, const GroupSampleInputs& inputs) {
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

std::vector<Sample> load_group(const TaskGroup& group, const GroupSampleInputs& inputs) {
  LongBenchLoadOptions options;
  options.tokenizer = inputs.tokenizer;
  options.max_length = inputs.tokenizer ? prompt_limit(group, inputs) : 0;
  options.limit = group.sample_count;
  std::vector<Sample> samples = load_longbench(
      benchmark_data_file(group.spec, group.task).parent_path().string(), group.task, options);
  for (Sample& s : samples) s.extra["prompt_limit"] = options.max_length;
  return samples;
}

}  // namespace

Benchmark longbench_benchmark() {
  Benchmark b;
  b.name = "longbench";
  b.title = "LongBench";
  b.source = "THUDM/LongBench LongBench/pred.py, LongBench/eval.py, LongBench/metrics.py";
  b.option_keys = {"data_dir"};
  b.default_tasks = longbench_kv_paper_datasets();
  b.lengths_optional = true;
  b.layout = TableLayout::kLongBenchCategories;
  for (const LongBenchDataset& dataset : longbench_datasets()) {
    b.table_tasks.emplace_back(dataset.name);
    b.table_tasks.push_back(std::string(dataset.name) + "_e");
  }
  b.download_hint =
      "unzip data.zip of the THUDM/LongBench dataset (one {dataset}.jsonl per dataset) there";
  b.check_task = [](const std::string& task) { longbench_dataset(task); };
  b.loads_from_files = [](const BenchmarkSpec&, const std::string&) { return true; };
  b.samples = load_group;
  b.score = [](const std::string& task, const std::string& answer, const Sample& sample) {
    return longbench_score_sample(longbench_dataset(task), answer, sample.references,
                                  sample.all_classes);
  };
  return b;
}

}  // namespace kvb
