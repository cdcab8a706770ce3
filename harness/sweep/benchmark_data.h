// Where a sweep group's samples come from: the benchmark registry (datasets/registry.h) generates
// or loads them (RULER, NIAH and InfiniteBench's synthetic tasks are generated; LongBench v1 and
// InfiniteBench's other tasks come from the official data files in the benchmark's data_dir). The
// runner and any backend call the same functions, so a group's sample count is known when the
// sweep is planned (resume and sharding need it) and the loaded samples match it.
#pragma once

#include <string>
#include <vector>

#include "datasets/data_paths.h"
#include "datasets/registry.h"  // loads_from_files, benchmark_data_file, GroupSampleInputs
#include "datasets/sample.h"

namespace kvb {

struct SampleGroup;

// Checks, before anything runs, that every data file each group reads is there: the essays and
// word lists a generated task needs (found through `data`) and each loaded task's JSONL file.
// InputError naming the config key (benchmarks[i], data_dir) and the fix.
void check_group_data(const std::vector<SampleGroup>& groups, const DataSearch& data);

// Where the data of a run came from, for the run record: {"haystack": "FOLDER (SOURCE)", ...}
// for the folders `groups` read.
nlohmann::json data_provenance(const std::vector<SampleGroup>& groups, const DataSearch& data);

// The samples of a group, in a deterministic order; at least group.sample_count of them for the
// loaded benchmarks (the first records of the file).
std::vector<Sample> samples_for_group(const SampleGroup& group, const GroupSampleInputs& inputs);

}  // namespace kvb
