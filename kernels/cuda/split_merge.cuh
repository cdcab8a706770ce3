// The two merges of split-KV (flash-decoding) attention, shared by the dense decode kernel
// (decode_attention.cu), the ART walk (early_exit_decode.cu) and the split-KV prefill
// (prefill_split_kv.cu). A split's partial is [max (log2 units), sum, acc[D]] with
// acc = sum_j 2^(s_j - max) v_j and sum its weights; merging partials is
// out = sum_c 2^(m_c - M) acc_c / sum_c 2^(m_c - M) l_c with M = max_c m_c.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/mma_tiles.cuh"

namespace kvb::cuda {

// Within a split: the 4 warps of an m16n8k16 walk merge through shared memory `scratch` — at least
// 4 * 16 * D + 2 * 4 * 16 floats, free to overwrite — and rows [0, rows) are written to
// partial_of(row). Warp w holds rows 16 (w % kRowTiles) + g and + 8 of the block's 16 kRowTiles
// rows over its own slice of every key tile, so the 4 / kRowTiles warps of a row tile merge: with
// kRowTiles 1 all 4 warps hold the same 16 rows (the dense decode: the group's query heads), with 4
// each warp holds rows of its own and only passes them on (the split-KV prefill). row_sum is this
// thread's share (the quad's lanes are summed here).
template <int D, int kThreads, int kRowTiles = 1, typename PartialOf>
__device__ __forceinline__ void store_split_partials(float (&o)[D / 8][4],
                                                     const float (&row_max)[2], float (&row_sum)[2],
                                                     float* scratch, int rows,
                                                     PartialOf partial_of) {
  static_assert(kRowTiles == 1 || kRowTiles == 2 || kRowTiles == 4, "4 warps of row tiles");
  constexpr int kSlices = 4 / kRowTiles;  // warps per row tile
  constexpr int kDimTiles = D / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = quad_sum(row_sum[r]);
  float* s_acc = scratch;             // [4][16][D]
  float* s_max = s_acc + 4 * 16 * D;  // [4][16]
  float* s_sum = s_max + 4 * 16;      // [4][16]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (t == 0) {
      s_max[warp * 16 + row] = row_max[r];
      s_sum[warp * 16 + row] = row_sum[r];
    }
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      s_acc[(warp * 16 + row) * D + dt * 8 + 2 * t] = o[dt][2 * r];
      s_acc[(warp * 16 + row) * D + dt * 8 + 2 * t + 1] = o[dt][2 * r + 1];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
    const int row = idx / D, dim = idx % D;
    // Slice s of the row sits with warp row / 16 + s * kRowTiles, at its row row % 16: slot
    // row + 16 s kRowTiles.
    float best = -INFINITY;
    for (int s = 0; s < kSlices; ++s) best = fmaxf(best, s_max[row + s * kRowTiles * 16]);
    float sum = 0.f, value = 0.f;
    for (int s = 0; s < kSlices; ++s) {
      const int slot = row + s * kRowTiles * 16;
      const float weight = best == -INFINITY ? 0.f : exp2f(s_max[slot] - best);
      sum += s_sum[slot] * weight;
      value += s_acc[slot * D + dim] * weight;
    }
    float* partial = partial_of(row);
    if (dim == 0) {
      partial[0] = best;
      partial[1] = sum;
    }
    partial[2 + dim] = value;
  }
}

// Across splits, one block per (query head, sequence), one thread per dimension (blockDim.x == D,
// whole warps): out[dim] from partials [0, used) (stride D + 2). The block is latency-bound (a few
// KB from L2), so its loads go out in as few dependent rounds as possible: kRound splits per round
// (64: the dense kernel's splits of one head at batch 1 take one round trip), folded with a running
// maximum. Each lane holds two splits' max and sum, passed to the warp by shuffles, so a thread
// holds only its dimension's kRound values: the merge then fits beside the decode kernels' blocks
// on an SM and is resident (launch.cuh) while they finish. The first round's loads cover [0,
// min(stored, kRound)) whatever `used` is: `used` may come from a load of its own (a length, a stop
// word), and its round trip then overlaps theirs; splits in [used, stored) hold stale partials (any
// bits) and are masked after the loads. Sums run in split order, as a sequential merge. `lse`, when
// given, receives the row's log-sum-exp in natural-log units (max ln 2 + ln sum), as the prefill
// kernels.
template <int D>
__device__ __forceinline__ void merge_split_partials(const float* partial, int stored, int used,
                                                     __nv_bfloat16* out, float* lse = nullptr) {
  constexpr int kRound = 64;
  const int dim = threadIdx.x, lane = threadIdx.x % 32;
  float best = -INFINITY, sum = 0.f, value = 0.f;
  for (int c0 = 0; c0 < stored; c0 += kRound) {
    if (c0 > 0 && c0 >= used) break;
    float m[2], l[2], v[kRound];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = c0 + 32 * h + lane;
      const float* p = partial + int64_t(c) * (D + 2);
      m[h] = c < stored ? p[0] : -INFINITY;
      l[h] = c < stored ? p[1] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < kRound; ++k)
      v[k] = c0 + k < stored ? partial[int64_t(c0 + k) * (D + 2) + 2 + dim] : 0.f;
    float round_best = -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (c0 + 32 * h + lane >= used) {
        m[h] = -INFINITY;
        l[h] = 0.f;
      }
      round_best = fmaxf(round_best, m[h]);
    }
#pragma unroll
    for (int k = 0; k < kRound; ++k)
      if (c0 + k >= used) v[k] = 0.f;
    for (int off = 16; off > 0; off /= 2)
      round_best = fmaxf(round_best, __shfl_xor_sync(0xffffffff, round_best, off));
    const float new_best = fmaxf(best, round_best);
    if (new_best == -INFINITY) continue;           // nothing but empty splits so far
    const float rescale = exp2f(best - new_best);  // 0 while best is -inf
    sum *= rescale;
    value *= rescale;
    float w[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) w[h] = exp2f(m[h] - new_best);  // 0 for empty and masked splits
#pragma unroll
    for (int k = 0; k < kRound; ++k) {
      const float weight = __shfl_sync(0xffffffff, w[k / 32], k % 32);
      sum += __shfl_sync(0xffffffff, l[k / 32], k % 32) * weight;
      value += v[k] * weight;
    }
    best = new_best;
  }
  out[dim] = __float2bfloat16(sum > 0.f ? value / sum : 0.f);
  if (lse != nullptr && dim == 0)
    *lse = sum > 0.f ? best * 0.6931471805599453f + logf(sum) : -INFINITY;
}

}  // namespace kvb::cuda
