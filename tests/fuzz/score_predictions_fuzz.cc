// libFuzzer target for `kvbench score` (harness/commands/cli_score.cc): a predictions JSONL file
// scored with each benchmark's official metric. Byte 0 picks the benchmark and dataset (every
// LongBench and LongBench-E dataset, every InfiniteBench task, every RULER task, NIAH), byte 1 the
// flags; the rest is the file. Any input must score or raise InputError / FormatError naming the
// file and line. Seeds: make_fuzz_seeds.cc.
#include <cstddef>
#include <cstdint>

#include "harness/commands/cli.h"
#include "tests/fuzz/fuzz_choices.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const std::vector<std::pair<std::string, std::string>>& targets() {
  static const auto all = kvb::fuzz::benchmark_files(/*with_scored=*/true);
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvb::fuzz::silence_stdout();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto& choice = targets()[data[0] % targets().size()];
  const std::string& benchmark = choice.first;
  const std::string& dataset = choice.second;
  const auto file = kvb::fuzz::scratch_dir() / "predictions.jsonl";
  kvb::fuzz::write_file(file, kvb::fuzz::as_text(data + 2, size - 2));
  std::vector<std::string> argv = {"--benchmark",   benchmark,     "--dataset",   dataset,
                                   "--predictions", file.string(), "--per-sample"};
  if (data[1] & 1) argv.push_back("--json");
  if (data[1] & 2) argv.insert(argv.end(), {"--code-sim", "levenshtein"});
  if (data[1] & 4) argv.insert(argv.end(), {"--model-name", "gpt4"});
  kvb::fuzz::accepts([&] {
    if (kvb::cli::score(argv) != 0) kvb::fuzz::violated("score returned non-zero without an error");
  });
  return 0;
}
