// RoPE on one pair of a bf16 head, shared by the RoPE kernels (apply_rope in rope.cu, the decode
// step's fused rope + append in transformer_ops.cu) and the decode attention that appends its
// step's token itself (decode_append.cuh), so all round exactly alike. CPU twin:
// kernels/cpu/rope.h.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/rope.h"

namespace kvb::cuda {

// The columns of pair i of a head: (i, i + half) for the halves pairing (Llama/HF), (2i, 2i + 1)
// for interleaved pairs (GGUF-native).
__device__ __forceinline__ void rope_pair_columns(int i, int half, bool interleaved, int& a,
                                                  int& b) {
  a = interleaved ? 2 * i : i;
  b = interleaved ? 2 * i + 1 : i + half;
}

// value + bias rounded to bf16, as the row is stored before it is rotated.
__device__ __forceinline__ float with_bias(__nv_bfloat16 value, const __nv_bfloat16* bias,
                                           int column) {
  const float x = __bfloat162float(value);
  return bias ? __bfloat162float(__float2bfloat16(x + __bfloat162float(bias[column]))) : x;
}

// (x0, x1) rotated by the angle whose sine and cosine are given, each rounded once to bf16.
__device__ __forceinline__ void rotate_pair(float x0, float x1, float sine, float cosine,
                                            __nv_bfloat16& r0, __nv_bfloat16& r1) {
  r0 = __float2bfloat16(__fsub_rn(__fmul_rn(x0, cosine), __fmul_rn(x1, sine)));
  r1 = __float2bfloat16(__fadd_rn(__fmul_rn(x0, sine), __fmul_rn(x1, cosine)));
}

// Adds the bias to a qkv row and rotates its Q and K heads (one block per row). A rotation angle
// depends on the position and the pair index only, so each thread takes one pair index for a group
// of heads and computes its sine and cosine once for all of them (per element, the sincosf work was
// the costliest part of a long prefill's RoPE: results/gpu-kernel-tuning.md §3.1).
__device__ inline void apply_rope_row(const RopeArgs& args, int row) {
  const int heads = args.n_query_heads + 2 * args.n_kv_heads;
  const int width = heads * args.head_dim;
  __nv_bfloat16* x = args.qkv + int64_t(row) * width;
  if (args.bias)
    for (int j = threadIdx.x; j < width; j += blockDim.x)
      x[j] = __float2bfloat16(with_bias(x[j], args.bias, j));
  __syncthreads();
  const int half = args.head_dim / 2;
  const int rotated_heads = args.n_query_heads + args.n_kv_heads;  // Q and K, not V
  const int head_groups = max(1, min(int(blockDim.x) / half, rotated_heads));
  const float position = float(args.positions[row]);
  for (int idx = threadIdx.x; idx < head_groups * half; idx += blockDim.x) {
    const int i = idx % half;
    float s, c;
    sincosf(position * args.inv_freq[i], &s, &c);
    int a, b;
    rope_pair_columns(i, half, args.interleaved, a, b);
    for (int head = idx / half; head < rotated_heads; head += head_groups) {
      __nv_bfloat16* h = x + head * args.head_dim;
      rotate_pair(__bfloat162float(h[a]), __bfloat162float(h[b]), s, c, h[a], h[b]);
    }
  }
}

}  // namespace kvb::cuda
