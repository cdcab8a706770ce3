#include "harness/sweep/benchmark_data.h"

#include <set>

#include "common/errors.h"
#include "harness/sweep/sweep.h"

namespace kvb {

void check_group_data(const std::vector<SampleGroup>& groups, const DataSearch& data) {
  std::set<std::pair<std::string, std::string>> checked;  // (benchmark key, task)
  for (const SampleGroup& group : groups) {
    const BenchmarkSpec& spec = group.benchmark;
    const std::string key = spec.key.empty() ? spec.benchmark : spec.key;
    if (!checked.insert({key, group.task}).second) continue;
    try {
      const Benchmark& benchmark = find_benchmark(spec.benchmark);
      if (loads_from_files(spec, group.task))
        benchmark_data_file(spec, group.task);
      else if (benchmark.check_generator_data)
        benchmark.check_generator_data(group.task, data);
    } catch (const InputError& e) {
      const std::string message = e.what();
      if (message.rfind("key '", 0) == 0) throw;  // names its key already
      throw InputError("key '" + key + "' (" + spec.benchmark + " " + group.task +
                       ") and the sweep-wide key 'data_dir': " + message);
    }
  }
}

nlohmann::json data_provenance(const std::vector<SampleGroup>& groups, const DataSearch& data) {
  nlohmann::json out = nlohmann::json::object();
  const auto record = [&](const std::string& what, const std::filesystem::path& folder) {
    if (!folder.empty()) out[what] = folder.string() + " (" + data_source_label(folder) + ")";
  };
  for (const SampleGroup& group : groups) {
    const Benchmark& benchmark = find_benchmark(group.benchmark.benchmark);
    if (benchmark.generator_folders)
      for (const auto& [what, folder] : benchmark.generator_folders(data)) record(what, folder);
    if (loads_from_files(group.benchmark, group.task))
      record(benchmark.name, group.benchmark.data_dir);
  }
  return out;
}

std::vector<Sample> samples_for_group(const SampleGroup& group, const GroupSampleInputs& inputs) {
  const BenchmarkSpec& spec = group.benchmark;
  const TaskGroup task_group{spec, group.task, group.length, group.sample_count};
  std::vector<Sample> samples = find_benchmark(spec.benchmark).samples(task_group, inputs);
  if (samples.empty())
    throw InputError("no samples were generated for " + spec.benchmark + "/" + group.task);
  return samples;
}

}  // namespace kvb
