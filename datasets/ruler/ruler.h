// RULER (NVIDIA/RULER) sample generation: the 13 tasks of scripts/synthetic.yaml, with HEAD's
// length fitting (spec §1.1): the prompt is the model's chat frame around the task template, then
// the answer prefix; its token count (model tokenizer, no BOS) plus tokens_to_generate must be
// <= the requested length. The haystack size is found by binary search over haystack units on
// fresh random samples, and each sample is re-drawn with `incremental` fewer units until it fits.
//
// Randomness: one kvb::PythonRandom seeded with the request seed drives every draw (as RULER's
// global `random.seed(seed)`), and RULER's fixed-seed shuffles use a fresh PythonRandom(seed), so
// those permutations are CPython's. Other draws follow CPython's algorithms but not necessarily
// its call order, so samples are distribution-faithful, not byte-identical (spec §0).
//
// The chat frame is written into the sample text (use_chat_template = false), because RULER's
// prompt is not always "frame around the user message": the single-needle rewrite also rewrites
// the frame, and the CWE one-shot repeats the whole framed prompt before the real one.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "datasets/generation.h"
#include "datasets/sample.h"

namespace kvb {

struct RulerDataPaths {
  std::filesystem::path essays_dir;     // Paul Graham essays, *.txt (fixtures/haystack/pg_essays)
  std::filesystem::path wordlists_dir;  // wonderwords nounlist/adjectivelist/verblist.txt
  std::filesystem::path qa_dir;         // squad.json (SQuAD v2 dev), hotpotqa.json (distractor dev)
};

// Default folders for a project checkout at `project_root`, or under `data_dir` when given:
// essays from DATA/pg_essays or DATA/haystack/pg_essays, word lists from DATA/wordlists or
// DATA/wonderwords, QA files from DATA/ or DATA/qa.
RulerDataPaths ruler_data_paths(const std::filesystem::path& project_root,
                                const std::filesystem::path& data_dir);

const std::vector<std::string>& ruler_task_names();
int ruler_tokens_to_generate(const std::string& task);

// Generates request.num_samples samples of request.task at request.length tokens.
// Throws InputError for an unknown task or missing data (naming the file and where to get it),
// CapacityError when the length cannot hold even the smallest haystack.
std::vector<Sample> generate_ruler(const GenerationRequest& request, const Tokenizer& tokenizer,
                                   const ChatFrame& frame, const RulerDataPaths& data,
                                   const ProgressFn& progress = nullptr);

}  // namespace kvb
