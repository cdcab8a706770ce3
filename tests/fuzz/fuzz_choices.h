// The lists a fuzz target's first byte indexes (benchmark_jsonl_fuzz.cc,
// score_predictions_fuzz.cc), shared with make_fuzz_seeds.cc so that a seed's first byte names the
// file it was written for.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "datasets/infinitebench/scorers.h"
#include "datasets/longbench/longbench.h"
#include "datasets/ruler/ruler.h"

namespace kvb::fuzz {

// (benchmark, dataset or task): every LongBench dataset, every LongBench-E file, every
// InfiniteBench task, and for `with_scored` every RULER task and NIAH as `kvbench score` takes
// them.
inline std::vector<std::pair<std::string, std::string>> benchmark_files(bool with_scored) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& d : longbench_datasets()) out.emplace_back("longbench", std::string(d.name));
  for (const auto& e : longbench_e_datasets()) out.emplace_back("longbench", e + "_e");
  for (const auto& t : infinitebench_tasks()) out.emplace_back("infinitebench", t);
  if (with_scored) {
    for (const auto& t : ruler_task_names()) out.emplace_back("ruler", t);
    out.emplace_back("niah", "niah");
  }
  return out;
}

}  // namespace kvb::fuzz
