// A sample's cells generated together on any Engine (README.md, "A sample's cells decoded
// together"): the prompt is prefilled once, forked into one sequence per cell, each sequence
// compressed under its own plan, the question appended (question-agnostic mode), and all of them
// decoded greedily as one batch, each stopping at its own end of turn, stop string or max new
// tokens (or, with `batch_cells` false, one after another at batch 1 each, still from the one
// prefill).
//
// Cells whose decode steps differ in kind (a decode selector, ART's walk) are decoded in batches
// of their own (decode_group_of), since a device engine runs one decode-time method per batch;
// the batches still replay the one prefill, which stays in a sequence of its own while they decode
// one after another (forked into the others). A batch larger than the engine's memory is split;
// only when the prompt cannot stay beside even one cell does each part prefill on its own.
//
// Timings (vLLM's definitions, README.md "Latency rows"), per cell: prefill_ms is the shared
// prefill (plus the question chunk), compress_ms that cell's selection and compaction, TTFT =
// prefill + compress + question, TPOT = (end - first token) / (tokens - 1) of the batched steps: at
// batch 1 (`batch_cells` false) the per-request latency, above it the step time of the whole batch.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/generation.h"

namespace kvb {

struct CellRequest {
  CachePlan* plan = nullptr;  // must outlive the call
  GenerationOptions options;
};

struct BatchOptions {
  // false: each cell decoded on its own at batch 1, one after another, after the prefill its batch
  // shares (prefill reuse alone, on every backend: the cells are forked from the prefilled
  // sequence and compressed as when they decode together).
  bool batch_cells = true;
  // true: each cell in a batch and a prefill of its own (a request run alone: its TTFT, TPOT and
  // peak memory are that cell's, not shared with the sample's other cells).
  bool cells_alone = false;
};

// Per cell, in `cells` order.
std::vector<GenerationResult> generate_cells(Engine& engine, const Tokenizer* tokenizer,
                                             const std::vector<TokenId>& context,
                                             const std::vector<TokenId>& question,
                                             const std::vector<CellRequest>& cells,
                                             const BatchOptions& options = {});

// Cells of one decode group can share a batch: "" for plain attention over the (compressed)
// cache, otherwise the decode-time method with its budget and parameters.
std::string decode_group_of(const CachePlan& plan);

}  // namespace kvb
