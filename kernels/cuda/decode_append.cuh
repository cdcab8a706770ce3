// The decode step's append done inside an attention kernel (DecodeAppend in attention.h): the
// new token's K/V row written with its bias and RoPE, and the group's queries rotated for the
// kernel's own use. Shared by the dense decode kernel (decode_attention.cu) and the ART walk
// (early_exit_decode.cu), so both round exactly as apply_rope + append_kv would (rope.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/rope.cuh"

namespace kvb::cuda {

// One thread's RoPE pair: thread i takes pair i % (D/2) of every row it rotates, so one sine and
// cosine serve them all. set_up reads only the constant frequencies (may run before the PDL wait).
template <int D>
struct StepRope {
  static constexpr int kHalf = D / 2;
  int col_a = 0, col_b = 0;
  float inv_freq = 0.f, sine = 0.f, cosine = 0.f;

  __device__ void set_up(const DecodeAppend& append) {
    const int pair = threadIdx.x % kHalf;
    rope_pair_columns(pair, kHalf, append.interleaved, col_a, col_b);
    inv_freq = append.inv_freq[pair];
  }
  __device__ void at_position(int position) { sincosf(float(position) * inv_freq, &sine, &cosine); }
  // Columns (col_a, col_b) of the head at `col` in the qkv row, biased and rotated.
  __device__ void rotate(const DecodeAppend& append, const __nv_bfloat16* row, int col,
                         __nv_bfloat16& r0, __nv_bfloat16& r1) const {
    rotate_pair(with_bias(row[col + col_a], append.bias, col + col_a),
                with_bias(row[col + col_b], append.bias, col + col_b), sine, cosine, r0, r1);
  }
};

// Writes KV head `kv_head`'s new entry from the sequence's qkv `row` into cache row `dest_row`.
// The caller syncs the block before copying tiles that hold it.
template <int D, int kThreads>
__device__ void write_new_entry(const DecodeAppend& append, const StepRope<D>& rope,
                                const __nv_bfloat16* row, int n_query_heads, int n_kv_heads,
                                int kv_head, int64_t dest_row) {
  const int k_col = (n_query_heads + kv_head) * D;
  const int v_col = (n_query_heads + n_kv_heads + kv_head) * D;
  __nv_bfloat16* k_new = append.k_cache + dest_row * D;
  __nv_bfloat16* v_new = append.v_cache + dest_row * D;
  if (threadIdx.x < StepRope<D>::kHalf)
    rope.rotate(append, row, k_col, k_new[rope.col_a], k_new[rope.col_b]);
  for (int j = threadIdx.x; j < D; j += kThreads)
    v_new[j] = __float2bfloat16(with_bias(row[v_col + j], append.bias, v_col + j));
}

// Query heads head0 .. head0 + heads - 1, biased and rotated, as rows 0 .. rows_out - 1 through
// store(row, column, value) (rows past `heads` get zeros).
template <int D, int kThreads, typename Store>
__device__ void rotate_queries(const DecodeAppend& append, const StepRope<D>& rope,
                               const __nv_bfloat16* row, int head0, int heads, int rows_out,
                               Store store) {
  constexpr int kHalf = StepRope<D>::kHalf;
  for (int r = threadIdx.x / kHalf; r < rows_out; r += kThreads / kHalf) {
    __nv_bfloat16 r0 = __float2bfloat16(0.f), r1 = r0;
    if (r < heads) rope.rotate(append, row, (head0 + r) * D, r0, r1);
    store(r, rope.col_a, r0);
    store(r, rope.col_b, r1);
  }
}

}  // namespace kvb::cuda
