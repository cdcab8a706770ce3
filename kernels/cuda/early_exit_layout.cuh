// Internal to the ART walk (early_exit_decode.cu: the walk kernel, early_exit_decide.cu: the
// decision): the walk's geometry, the walker, the workspace layout and the merge of partial states.
// Semantics: kernels/cuda/early_exit_decode.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/early_exit_decode.h"

namespace kvb::cuda::early_exit {

constexpr int kTile = kEarlyExitBlock;
constexpr int kMaxRows = 8;  // query heads per walker

__host__ __device__ inline int clamp_int(int x, int low, int high) {
  return x < low ? low : (x > high ? high : x);
}

__host__ __device__ inline int walk_blocks(int n, int sink_tokens) {
  if (n <= 0) return 0;
  const int sinks = clamp_int(sink_tokens, 0, n);
  return (sinks > 0 ? 1 : 0) + (n - sinks + kTile - 1) / kTile;
}

// Walk-block slots per (sequence, query head) in the workspace: enough for any walk over at most
// max_kv_length entries and any sink count.
__host__ __device__ inline int slot_count(int max_kv_length) {
  return (max_kv_length > 1 ? max_kv_length : 1) / kTile + 2;
}

// Entries [begin, end) of walk block w (0 = sink block when there are sinks, then recent-first).
__device__ inline void block_rows(int w, int n, int sinks, int& begin, int& end) {
  if (sinks > 0 && w == 0) {
    begin = 0;
    end = sinks;
    return;
  }
  const int recent = w - (sinks > 0 ? 1 : 0);
  end = n - recent * kTile;
  begin = max(sinks, end - kTile);
}

// How one call cuts the walks: chunk_blocks walk blocks per walk thread block (n_chunks of them
// per walker) and segment_blocks (a multiple of chunk_blocks) per decide thread block.
struct WalkLayout {
  int chunk_blocks = 1;
  int n_chunks = 1;
  int segment_blocks = 1;
  int n_segments = 1;
  int slots = 1;  // slot_count(max_kv_length)
};

struct Walker {
  int index = 0;  // into walker_state
  int head0 = 0;  // first query head
  int rows = 0;   // query heads walking together
  int n = 0;      // entries walked
  int64_t kv_row0 = 0;
  const int32_t* list = nullptr;  // index mode
  const float* bias = nullptr;
};

// axis: the KV head (dense) or the query head (index lists).
template <bool kIndexed>
__device__ inline int walker_index(const DecodeAttentionArgs& a, int axis, int b) {
  return kIndexed ? b * a.n_query_heads + axis : b * a.n_kv_heads + axis;
}

// The walker's entries count the step's new one when the walk appends it (the length is advanced
// by the last kernel of the call, so both kernels read the same value).
template <bool kIndexed>
__device__ inline Walker walker_of(const DecodeAttentionArgs& a, int axis, int b) {
  Walker w;
  const int group = a.n_query_heads / a.n_kv_heads;
  const int kv_head = kIndexed ? axis / group : axis;
  w.kv_row0 = a.kv_offset[b * a.n_kv_heads + kv_head];
  if constexpr (kIndexed) {
    w.index = walker_index<true>(a, axis, b);
    w.head0 = axis;
    w.rows = 1;
    const int64_t offset = a.index_offset[w.index];
    w.n = a.index_count[w.index];
    w.list = a.indices + offset;
    if (a.logit_bias) w.bias = a.logit_bias + offset;
  } else {
    w.index = walker_index<false>(a, axis, b);
    w.head0 = kv_head * group;
    w.rows = group;
    // From L2: the walk may have read the line before the wait for the previous kernel.
    w.n = __ldcg(a.kv_length + w.index) + (a.append.positions != nullptr ? 1 : 0);
  }
  return w;
}

// Workspace layout (floats). Per (sequence, query head) and walk block, a slot of 2 D + 4 floats:
// [max (log2 units), sum, the block's own mass at that max, unused, acc[D], out[D]] — the walk's
// running state R_b (acc unnormalised) and, where the decision keeps it, the output o_b. Then per
// (sequence, query head) and segment an aggregate [max, sum, unused, unused, acc[D]]. Then per
// walker and segment the decision's summary (SegmentSummary).
template <int D>
struct Workspace {
  static constexpr int kSlotFloats = 2 * D + 4;
  static constexpr int kAggregateFloats = D + 4;
  float* base;
  int batch, n_query_heads, slots;

  __device__ float* slot(int b, int head, int block) const {
    return base + ((int64_t(b) * n_query_heads + head) * slots + block) * kSlotFloats;
  }
  __device__ float* aggregate(int b, int head, int segment) const {
    const int64_t slot_floats = int64_t(batch) * n_query_heads * slots * kSlotFloats;
    return base + slot_floats +
           ((int64_t(b) * n_query_heads + head) * kMaxSegments + segment) * kAggregateFloats;
  }
  __device__ int4* summary(int walker, int segment) const {
    return reinterpret_cast<int4*>(aggregate(batch, 0, 0)) + int64_t(walker) * kMaxSegments +
           segment;
  }
};

inline size_t workspace_floats(int batch, int n_query_heads, int head_dim, int max_kv_length) {
  const size_t heads = size_t(batch) * n_query_heads;  // walkers <= heads
  const size_t slots = size_t(slot_count(max_kv_length));
  return heads * slots * (2 * head_dim + 4) + heads * kMaxSegments * (head_dim + 4) +
         heads * kMaxSegments * 4;
}

// One head's state over 4 consecutive dimensions: max (log2 units), sum, accumulator.
struct RowState {
  float m = -INFINITY, l = 0.f;
  float4 acc = {0.f, 0.f, 0.f, 0.f};
};

// s (+)= the partial (m, l, acc): the flash-decoding merge. Returns the partial's weight in the
// merged state (2^(m - M)), 0 when both are empty.
__device__ __forceinline__ float merge_into(RowState& s, float m, float l, float4 acc) {
  const float best = fmaxf(s.m, m);
  if (best == -INFINITY) return 0.f;
  const float keep = exp2f(s.m - best), take = exp2f(m - best);  // 0 for an empty side
  s.l = s.l * keep + l * take;
  s.acc.x = s.acc.x * keep + acc.x * take;
  s.acc.y = s.acc.y * keep + acc.y * take;
  s.acc.z = s.acc.z * keep + acc.z * take;
  s.acc.w = s.acc.w * keep + acc.w * take;
  s.m = best;
  return take;
}

// The launch of the decision kernel (early_exit_decide.cu).
void launch_decide(const EarlyExitDecodeArgs& args, const WalkLayout& layout, cudaStream_t stream);

}  // namespace kvb::cuda::early_exit
