// Where a sweep group's samples come from: the generators (RULER, NIAH, InfiniteBench's synthetic
// tasks) or the official data files in a benchmark's data_dir (LongBench v1; InfiniteBench's other
// tasks). The runner and any backend call the same functions, so a group's sample count is known
// when the sweep is planned (resume and sharding need it) and the loaded samples match it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "datasets/data_paths.h"
#include "datasets/generation.h"
#include "datasets/sample.h"
#include "engine/tokenizer.h"
#include "harness/config.h"

namespace kvb {

struct SampleGroup;

// True when (spec, task) reads "{task}.jsonl" from spec.data_dir instead of generating samples.
bool loads_from_files(const BenchmarkSpec& spec, const std::string& task);

// The task's data file. InputError naming the config key (spec.key + ".data_dir") when the folder
// or the file is missing, with what to download.
std::filesystem::path benchmark_data_file(const BenchmarkSpec& spec, const std::string& task);

// Records in the task's data file (non-blank lines, as the loaders count them); InputError when
// there are none.
int count_data_records(const BenchmarkSpec& spec, const std::string& task);

struct GroupSampleInputs {
  // The model's tokenizer: needed to fit generated samples to a length and to middle-truncate
  // loaded prompts. Null only for loaded benchmarks, whose prompts are then left whole (tests).
  const Tokenizer* tokenizer = nullptr;
  ChatFrame frame;                       // the model's chat template around one user message
  DataSearch data;                       // essays, word lists, QA files (config data_dir first)
  int model_context = 0;                 // tokens; 0 = unknown (no LongBench default truncation)
};

// Checks, before anything runs, that every data file each group reads is there: the essays and
// word lists a RULER task or NIAH needs (found through `data`) and each loaded benchmark's JSONL
// file. InputError naming the config key (benchmarks[i], data_dir) and the fix.
void check_group_data(const std::vector<SampleGroup>& groups, const DataSearch& data);

// Where the data of a run came from, for the run record: {"haystack": "FOLDER (SOURCE)", ...}
// for the folders `groups` read.
nlohmann::json data_provenance(const std::vector<SampleGroup>& groups, const DataSearch& data);

// The samples of a group, in a deterministic order; at least group.sample_count of them for the
// loaded benchmarks (the first records of the file).
std::vector<Sample> samples_for_group(const SampleGroup& group, const GroupSampleInputs& inputs);

// LongBench's prompt limit in tokens for a group (pred.py's max_length): the group's length when
// set, else the model's context minus the dataset's max new tokens and the chat frame's tokens.
// 0 means no truncation (context unknown).
int longbench_prompt_limit(const SampleGroup& group, const GroupSampleInputs& inputs);

}  // namespace kvb
