// RULER (NVIDIA/RULER) sample generation: the 13 tasks of scripts/synthetic.yaml, with HEAD's
// length fitting (docs/benchmarks.md §1.1): the prompt is the model's chat frame around the task
// template, then the answer prefix; its token count (model tokenizer, no BOS) plus
// tokens_to_generate must be <= the requested length. The haystack size is found by HEAD's binary
// search over haystack units on fresh random samples (FWE: its own linear search over the word
// count).
//
// Deliberate deviation, the per-sample fit: RULER then redraws each sample at that size and, while
// the draw overflows, drops `incremental` units (500 essay words, 25 noise lines, 10 documents;
// FWE budget // 32 words) and redraws. With SmolLM2 at 4K one such step is ~15% of the budget
// for the NIAH haystacks and ~45% for QA, so every sample whose first draw overflowed (up to
// three quarters of them for some tasks) used 84% (NIAH) or ~50% (QA) of the length; QA samples
// (question i, sized on question 0) also spread by ~8% per draw. Here each sample instead takes
// the largest size, at one-unit granularity, whose own fresh draw fits: it starts at the searched
// size, shrinks by the overshoot or grows into the slack (divided by the measured tokens per
// unit), bisecting once a size has overflowed, and redraws a few times while more than 5% of the
// budget stays empty (fit_sample in ruler_task.h). The content of a sample of a given size is
// drawn exactly as RULER draws it; the sizes move up to within about one unit of the budget. The
// search's size is recorded as extra.fitted_units, the sample's as extra.haystack_units.
//
// Randomness: one kvb::PythonRandom seeded with the request seed drives every draw (as RULER's
// global `random.seed(seed)`), and RULER's fixed-seed shuffles use a fresh PythonRandom(seed), so
// those permutations are CPython's. Other draws follow CPython's algorithms but not necessarily
// its call order, so samples are distribution-faithful, not byte-identical (docs/benchmarks.md §0).
//
// The chat frame is written into the sample text (use_chat_template = false), because RULER's
// prompt is not always "frame around the user message": the single-needle rewrite also rewrites the
// frame, and the CWE one-shot repeats the whole framed prompt before the real one. (RULER's
// prepare.py formats the model template around the task template and appends the answer prefix, and
// niah.py applies the rewrite to that whole string: docs/benchmarks.md §1.2. With SmolLM2's default
// system prompt this turns "You are a helpful" into "You is a helpful"; that is RULER's behaviour.)
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "datasets/data_paths.h"
#include "datasets/generation.h"
#include "datasets/sample.h"

namespace kvb {

struct RulerDataPaths {
  std::filesystem::path essays_dir;     // Paul Graham essays, *.txt (data/haystack/pg_essays)
  std::filesystem::path wordlists_dir;  // wonderwords nounlist/adjectivelist/verblist.txt
  std::filesystem::path qa_dir;         // squad.json (SQuAD v2 dev), hotpotqa.json (distractor dev)
  std::string searched;                 // the data folders looked in (for messages)
};

// The folders found by `search` (datasets/data_paths.h), each the first root that has it: essays
// in ROOT/haystack/pg_essays, ROOT/pg_essays or ROOT/PaulGrahamEssays; word lists in
// ROOT/wordlists or ROOT/wonderwords; QA files in ROOT/qa (or in the user's folder itself). A
// folder not found is left empty; check_ruler_task_data() says what is missing.
RulerDataPaths ruler_data_paths(const DataSearch& search);

// Throws InputError naming each data file `task` reads that `paths` does not hold, and the fix,
// without generating anything (the sweep's check before its first row).
void check_ruler_task_data(const std::string& task, const RulerDataPaths& paths);

const std::vector<std::string>& ruler_task_names();
int ruler_tokens_to_generate(const std::string& task);

// Generates request.num_samples samples of request.task at request.length tokens.
// Throws InputError for an unknown task or missing data (naming the file and where to get it),
// CapacityError when the length cannot hold even the smallest haystack.
std::vector<Sample> generate_ruler(const GenerationRequest& request, const Tokenizer& tokenizer,
                                   const ChatFrame& frame, const RulerDataPaths& data,
                                   const ProgressFn& progress = nullptr);

}  // namespace kvb
