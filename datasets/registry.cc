#include "datasets/registry.h"

#include <fstream>

#include "common/errors.h"

namespace kvb {

// Each defined in its benchmark's folder (datasets/<name>/<name>_benchmark.cc).
Benchmark ruler_benchmark();
Benchmark niah_benchmark();
Benchmark longbench_benchmark();
Benchmark infinitebench_benchmark();

namespace {

std::string names_where(const std::function<bool(const Benchmark&)>& keep) {
  std::string names;
  for (const auto& b : list_benchmarks())
    if (keep(b)) names += (names.empty() ? "" : ", ") + b.name;
  return names.empty() ? "none" : names;
}

std::string known_names() {
  return names_where([](const Benchmark&) { return true; });
}

}  // namespace

// The table: one line per benchmark.
const std::vector<Benchmark>& list_benchmarks() {
  static const std::vector<Benchmark> table = {
      ruler_benchmark(),
      niah_benchmark(),
      longbench_benchmark(),
      infinitebench_benchmark(),
  };
  return table;
}

const Benchmark* lookup_benchmark(const std::string& name) {
  for (const auto& benchmark : list_benchmarks())
    if (benchmark.name == name) return &benchmark;
  return nullptr;
}

const Benchmark& find_benchmark(const std::string& name) {
  if (const Benchmark* benchmark = lookup_benchmark(name)) return *benchmark;
  throw InputError("unknown benchmark '" + name + "' (known: " + known_names() + ")");
}

ScoredAnswer score_answer(const std::string& generated, const Sample& sample) {
  const Benchmark& benchmark = find_benchmark(sample.benchmark);
  ScoredAnswer scored;
  scored.answer = benchmark.answer ? benchmark.answer(generated, sample) : generated;
  scored.score = benchmark.score(sample.task, scored.answer, sample);
  if (benchmark.extra_metrics) scored.extra = benchmark.extra_metrics(scored.answer, sample);
  return scored;
}

FileScores score_predictions_file(const Benchmark& benchmark, const std::string& task,
                                  const std::string& path, const FileScoreOptions& options) {
  if (!benchmark.score_file)
    throw InputError(benchmark.name + " does not score predictions files (benchmarks that do: " +
                     names_where([](const Benchmark& b) { return bool(b.score_file); }) + ")");
  if (benchmark.check_task) benchmark.check_task(task);
  return benchmark.score_file(task, path, options);
}

void check_generated_task(const Benchmark& benchmark, const BenchmarkSpec& spec,
                          const std::string& task, const DataSearch& data) {
  if (benchmark.check_task) benchmark.check_task(task);
  if (benchmark.loads_from_files && benchmark.loads_from_files(spec, task))
    throw InputError(benchmark.name + " " + task +
                     " is loaded from its data files, not generated; a sweep config runs it from "
                     "the files in its \"data_dir\"" +
                     (benchmark.download_hint.empty() ? "" : ": " + benchmark.download_hint));
  if (benchmark.check_generator_data) benchmark.check_generator_data(task, data);
}

std::vector<Sample> generated_group_samples(const Benchmark& benchmark, const BenchmarkSpec& spec,
                                            const std::string& task, int length,
                                            const GroupSampleInputs& inputs) {
  // As harness/sweep/sweep.cc counts a generated group: samples per depth.
  const int depths = spec.depths.empty() ? 1 : static_cast<int>(spec.depths.size());
  const TaskGroup group{spec, task, length, spec.samples * depths};
  return benchmark.samples(group, inputs);
}

const Tokenizer& group_tokenizer(const TaskGroup& group, const GroupSampleInputs& inputs) {
  if (!inputs.tokenizer)
    throw InputError("internal: " + group.spec.benchmark + "/" + group.task +
                     " needs the model's tokenizer to fit its samples");
  return *inputs.tokenizer;
}

bool loads_from_files(const BenchmarkSpec& spec, const std::string& task) {
  const Benchmark& benchmark = find_benchmark(spec.benchmark);
  return benchmark.loads_from_files && benchmark.loads_from_files(spec, task);
}

std::filesystem::path benchmark_data_file(const BenchmarkSpec& spec, const std::string& task) {
  namespace fs = std::filesystem;
  const std::string key = (spec.key.empty() ? spec.benchmark : spec.key) + ".data_dir";
  const std::string& hint = find_benchmark(spec.benchmark).download_hint;
  std::error_code ec;
  if (spec.data_dir.empty() || !fs::is_directory(spec.data_dir, ec))
    throw InputError("key '" + key + "': " + spec.benchmark + " data folder '" + spec.data_dir +
                     "' does not exist; " + hint + ", or set '" + key +
                     "' to the folder that holds them");
  const fs::path file = fs::path(spec.data_dir) / (task + ".jsonl");
  if (!fs::is_regular_file(file, ec))
    throw InputError("key '" + key + "': " + spec.benchmark + " file " + file.string() +
                     " is missing (" + task + " needs " + task + ".jsonl in that folder; " + hint +
                     ")");
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

}  // namespace kvb
