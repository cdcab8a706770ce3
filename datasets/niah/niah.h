// Needle in a Haystack, as the KV-cache papers run it (KVCache-Factory / PyramidKV
// `run_needle_in_haystack.py`, adapted from gkamradt/LLMTest_NeedleInAHaystack; docs/benchmarks.md
// §2): the Paul Graham essays (sorted by file name, concatenated in whole passes), trimmed to the
// context length in model tokens, less the 200-token final_context_length_buffer; the needle's
// token ids inserted at int(len * (depth / 100)) moved left to just after a "." token (a sentence
// boundary), or appended at depth 100; the haystack then decoded. The prompt is KVCache-Factory's
// raw prompt (no chat template) and decoding stops at 30 new tokens or a newline.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "datasets/generation.h"
#include "datasets/sample.h"

namespace kvb {

// gkamradt's strings (needlehaystack/llm_needle_haystack_tester.py defaults).
inline constexpr char kNiahNeedle[] =
    "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny "
    "day.\n";
inline constexpr char kNiahQuestion[] = "What is the best thing to do in San Francisco?";
// KVCache-Factory run_needle_in_haystack.py: retrieval question and raw prompt.
inline constexpr char kNiahRetrievalQuestion[] = "The best thing to do in San Francisco is: ";
inline constexpr char kNiahPromptHead[] = "<|im_start|> This is a very long story book: <book> ";
// The raw prompt's own turn marker at the start of kNiahPromptHead: dropped when the chat template
// frames the prompt.
inline constexpr char kNiahRawTurnMarker[] = "<|im_start|> ";
inline constexpr char kNiahPromptBookEnd[] = " </book>.\n";
inline constexpr char kNiahPromptQuestion[] = " Based on the content of the book, Question: ";
inline constexpr char kNiahPromptAnswer[] = "\nAnswer:";
inline constexpr int kNiahMaxNewTokens = 30;
inline constexpr int kNiahFinalContextBuffer = 200;
// KVCache-Factory scripts/scripts_needle/visualize.py: the words whose recall is the heatmap score
// (its `expected_answer`; "day." keeps its period).
inline constexpr char kNiahRecallAnswer[] =
    "eat a sandwich and sit in Dolores Park on a sunny day.";

// round(np.linspace(0, 100, n)), KVCache-Factory's depth grid (n = 10 by default).
std::vector<double> niah_depths(int count);

struct NiahRequest {
  std::vector<int> context_lengths;  // in model tokens
  std::vector<double> depths;        // percent
  std::filesystem::path essays_dir;
  // false: the KV papers' raw prompt, "<|im_start|> This is a very long story book: ..." with no
  // chat template (run_needle_in_haystack.py). true: the same book and question inside the model's
  // chat template (the literal "<|im_start|> " head dropped): instruction-tuned models such as
  // SmolLM2 answer the raw prompt with an immediate end of turn.
  bool chat_template = false;
};

// One sample per (length, depth), lengths outer; each carries grid metadata in `extra`
// (context_length, depth_percent, length_index, depth_index, needle_token_index) and the scoring
// fields: references = {kNiahRecallAnswer} (the word-set recall of the heatmaps, which
// datasets/scoring.cc computes from references[0]), extra.rouge_target (the needle, stripped: the
// ROUGE-1 target of run_needle_in_haystack.py), extra.substring_answer (for substring match).
std::vector<Sample> generate_niah(const NiahRequest& request, const Tokenizer& tokenizer,
                                  const ProgressFn& progress = nullptr);

}  // namespace kvb
