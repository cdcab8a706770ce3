// The measurements of `kvbench bench` on the GPU (harness/bench/bench_gpu.h reads the flags): the
// device's read bandwidth and bf16 GEMM rate, then TTFT, TPOT, peak memory and KV bytes for a
// model or preset, each figure beside its bound (TPOT bound = (weight bytes + KV bytes) / measured
// read bandwidth). Built from the engine's generic operations; the policy plan decides what runs.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/device_selection.h"

namespace kvb {

// A decode selector (kind D) measured on the full cache beside Full: TPOT and its ratio.
struct SparseDecodeBench {
  std::string policy;                              // the plan's label
  std::shared_ptr<const DecodeSelector> selector;  // runs_on_device(); its spec per context
  Budget budget;  // a token budget (no fraction) is set per context from it
};

struct CudaBenchOptions {
  std::string model;   // a model path, or "" with preset
  std::string preset;  // e.g. "llama-3.1-8b" (random bf16 weights)
  std::vector<int> contexts = {4096};
  std::vector<int> batches = {1};
  std::string label = "full";  // the plan's label, as the output names it
  // A plan with a prefill policy keeps `budget` entries per head (the most recent: which entries
  // are kept does not change the decode cost, only how many).
  bool compress_prefill = false;
  std::optional<Budget> budget;
  // A plan with early exit (kind E): the decode step walks with it; TPOT is measured with and
  // without it on the same cache (speed-up and the fraction of KV blocks skipped).
  std::optional<EarlyExitParams> early_exit;
  // A plan with decode-time eviction (kind C, alone): its device form
  // (DecodeEvictionPolicy::device_eviction) at the kept budget runs in every timed step, which
  // then scores every entry and evicts one per head.
  std::shared_ptr<const DecodeEvictionPolicy> decode_eviction;
  // Decode selectors timed on the same full cache as the Full row (random projection rows for
  // sign codes without any: the decode cost does not depend on their values).
  std::vector<SparseDecodeBench> selectors;
  // Real text instead of random ids (`--prompt-file`, needs `model`): its tokens in the model's
  // tokenizer, repeated to each context, are prefilled and every TPOT figure decodes greedily from
  // that prefill's own keys and values (so ART sees the model's real attention); empty: random ids
  // and a random-filled cache.
  std::string prompt_text;
  int decode_steps = 64;
  // Tokens per prefill chunk (`--prefill-chunk`); activation memory is about 137 KB per token of a
  // chunk at Llama-3.1-8B shapes. 16K and 32K chunks gave the same TTFT at 32K tokens: the prefill
  // runs at the power cap either way (results/gpu-kernel-tuning.md §9.1).
  int prefill_chunk = CudaEngine::kPrefillChunk;
  bool find_max_batch = false;  // largest batch that fits, and throughput there
  bool use_graphs = true;
};

// Runs the benchmark; progress lines go to stderr; returns the figures as JSON.
nlohmann::json run_cuda_bench(const CudaBenchOptions& options);

}  // namespace kvb
