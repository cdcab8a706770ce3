// Decode-time eviction inside the decode step. CPU twins: kernels/cpu/decode_eviction.h (same
// names, same rules; the slots, rows and statistics are described there). Test:
// tests/cuda/backend_ops_test.cc (rows attention_probabilities_*, eviction_scores_*,
// evict_to_keep_*).
//
// Device differences: the cache rows are bf16 with one row of head_dim per entry from row
// kv_offset[s] of the layer's buffer; every launch has fixed sizes (width, the slot count) and
// reads the lengths from the device, so one captured decode graph serves every step.
// evict_to_keep runs one block per slot: `e` passes of a block-wide minimum find the e-th
// lowest-ranked candidate (e = entries evicted, 1 per step once a head is at its budget), then the
// kept rows move down in order, a tile at a time (destinations never pass their sources).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/decode_eviction.h"

namespace kvb::cuda {

using EvictionStatistic = kernels::EvictionStatistic;

struct AttentionProbabilitiesArgs {
  float* logits = nullptr;  // [B * Hq, stride]: q.k (query_key_scores); p on return
  int64_t stride = 0;
  const float* lse = nullptr;        // [Hq, B]: decode_attention's log-sum-exp
  const int32_t* lengths = nullptr;  // [B * Hkv]
  int batch = 0, n_query_heads = 0, n_kv_heads = 0;
  int width = 0;
  float scale = 0;
};
void attention_probabilities(const AttentionProbabilitiesArgs& args, cudaStream_t stream);

struct EvictionScoresArgs {
  const float* probabilities = nullptr;  // [B * Hq, probability_stride]
  int64_t probability_stride = 0;
  const int32_t* lengths = nullptr;  // [B * Hkv]
  int batch = 0, n_query_heads = 0, n_kv_heads = 0;
  int width = 0;  // upper bound on every length (the grid's extent)
  EvictionStatistic statistic = EvictionStatistic::kAccumulatedGroupSum;
  int pool_kernel = 1;
  bool round_bf16 = false;
  int recent = 0;
  float* scores = nullptr;  // [B * Hkv, score_stride]
  int64_t score_stride = 0;
};
void eviction_scores(const EvictionScoresArgs& args, cudaStream_t stream);

struct EvictToKeepArgs {
  __nv_bfloat16* keys = nullptr;
  __nv_bfloat16* values = nullptr;
  const int64_t* kv_offset = nullptr;  // [n_slots], in rows
  int32_t* lengths = nullptr;          // [n_slots], updated
  int n_slots = 0, head_dim = 0;       // head_dim a multiple of 8, at most 256
  float* scores = nullptr;
  int64_t score_stride = 0;
  bool compact_scores = false;
  int keep = 0;
  int sinks = 0, recent = 0;
  int32_t* entry_ids = nullptr;  // optional, as the twin's
  const int32_t* appended_ids = nullptr;
  int n_kv_heads = 1;
};
void evict_to_keep(const EvictToKeepArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
