// RoPE on one pair of a bf16 head, shared by the prefill/decode RoPE kernels (transformer_ops.cu)
// and the decode attention that appends its step's token itself (decode_attention.cu), so both
// round exactly alike. CPU twin: kernels/cpu/rope.h.
#pragma once

#include <cuda_bf16.h>

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

}  // namespace kvb::cuda
