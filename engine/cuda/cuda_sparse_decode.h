// Decode-time selection (kind D) inside CudaEngine's decode step, from the generic operations a
// policy asks for (engine/device_selection.h): scores of the cached entries (sign codes, page
// bounds or exact q.k; kernels/cuda/{binary_hash,page_bounds,query_key_scores}.h), a per-list
// top-k (kernels/cuda/topk_select.h), then the index-list form of decode_attention; or LSH
// sampling (kernels/cuda/lsh_sampling.h), whose lists carry a logit bias per entry. Each policy's
// CPU selector is the twin: tests/cuda/cuda_sparse_engine_test.cc compares their lists on the
// same keys and queries.
//
// Built once from the cache after prefill (every slot at the same length L): sign codes cover the
// L prompt keys of every selecting layer (codes, the forced worst-reconstructed set); later
// entries are never coded and join every list as a forced tail L .. T-1. Page bounds cover the L
// keys and the step updates the page of each appended entry. Exact scores need no metadata. LSH
// sampling hashes the prompt's middle keys (centred on their mean); its lists, of a length only the
// data decides, get room for the worst case: every entry up to the capacity, per query head.
// Every launch of a step has fixed sizes; what grows with the cache (the tail, the pages and
// their lengths, the exact scores) is read from the device lengths, so one captured decode graph
// serves every step. The exception is a budget that still moves with the cache (pages while the
// cache is shorter than the budget, a fraction of the length): prepare_step()'s key changes and the
// engine re-captures.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "engine/device_selection.h"
#include "engine/model_config.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"

namespace kvb {

// The last projection rows a sign-code selection fitted on the device, under a fingerprint of
// what they are a function of (the prompt keys' bits, the start vectors, the fit's options and
// shapes). The engine keeps them from one selection to the next until its next prefill, so that
// the cells forked from one prefill (a sample's budgets, with or without EAS) fit once, while a
// cell that prefills on its own (a latency row: a request alone) pays its whole fit.
struct ProjectionFitMemo {
  uint64_t fingerprint = 0;
  cuda::DeviceBuffer rows;   // [n_layers, Hkv, 64, d] f32; empty: nothing to reuse
  int fits = 0, reuses = 0;  // for tests and logs
  void forget() {
    rows = cuda::DeviceBuffer();
    fingerprint = 0;
  }
};

// The engine's cache as the selectors read it. Slot s = b * Hkv + h holds rows
// s * capacity .. s * capacity + length - 1 of each layer's K buffer.
struct SparseCacheView {
  const ModelConfig* config = nullptr;
  int batch = 0;
  int capacity = 0;
  int length = 0;                          // of every slot at the start (the prompt length L)
  std::vector<const __nv_bfloat16*> keys;  // per layer
  ProjectionFitMemo* fits = nullptr;       // the engine's; nullptr: every selection fits anew
};

class CudaSparseDecode {
 public:
  // Builds the per-layer metadata on `stream` (returns once it is done). InputError for a
  // projection of the wrong size, an empty cache, an unsupported head dimension / GQA group or a
  // combination of building blocks the device does not run.
  CudaSparseDecode(DeviceSelectionSpec spec, const SparseCacheView& cache, cudaStream_t stream);
  ~CudaSparseDecode();

  bool selects(int layer) const;
  // Sets the host-side sizes of the next step (the cache holds `length` entries per slot once
  // the step's token is appended); returns a key that changes when a captured step is stale.
  int prepare_step(int length);
  // Selection and attention of one selecting layer for sequences [first, first + dense.batch):
  // `dense` are the decode step's arguments of the full attention of those sequences (their new
  // K/V appended, kv_length already counting it, kv_offset and kv_length from sequence `first`
  // on). The per-sequence metadata and lists of the other sequences stay as they are, so the
  // sequences of a batch can also decode one after another (a sub-batch step).
  void attend(int layer, cuda::DecodeAttentionArgs dense, int first, cudaStream_t stream);

  // The list query head a of sequence b attended to at `layer` in the last step that computed
  // sequence b (synchronises).
  std::vector<int32_t> selection(int layer, int seq, int q_head, cudaStream_t stream) const;
  // The logit biases of that list (LSH sampling), empty for selections without them.
  std::vector<float> selection_bias(int layer, int seq, int q_head, cudaStream_t stream) const;
  // With spec.record_queries: that step's post-RoPE queries of sequence b, [Hq, head_dim].
  std::vector<float> recorded_query(int layer, int seq, cudaStream_t stream) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvb
