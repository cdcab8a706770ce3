// Bias and rotary position embedding of qkv rows on the GPU, in bf16. CPU twin: kernels/cpu/rope.h
// (the bias is the caller's there). Test: tests/cuda/backend_ops_test.cc. The per-pair arithmetic
// both this and the decode attention's in-kernel append use: kernels/cuda/rope.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

// In place on qkv rows [n, (Hq + 2 Hkv) * head_dim]: adds the optional bias, then rotates the Q and
// K heads by position. inv_freq has head_dim/2 entries (llama3 scaling already applied).
// interleaved: rotate adjacent pairs (2i, 2i+1) (GGUF-permuted weights); otherwise the halves
// (i, i + head_dim/2) as HF's rotate_half.
struct RopeArgs {
  __nv_bfloat16* qkv = nullptr;
  const __nv_bfloat16* bias = nullptr;  // [(Hq + 2 Hkv) * head_dim] or nullptr
  const int32_t* positions = nullptr;   // [n]
  const float* inv_freq = nullptr;      // [head_dim / 2]
  int n = 0;
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  bool interleaved = false;
};
void apply_rope(const RopeArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
