// L2 norm of every bf16 row of a set of [length, dim] row blocks, f32 accumulation: the keys'
// norms a query-agnostic policy scores with (KNorm), computed where the cache lives so that only
// [n_heads, length] floats leave the device. CPU twin and contract: kernels/cpu/row_norms.h.
// Test: tests/cuda/row_norms_test.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

struct RowNormsArgs {
  const __nv_bfloat16* rows = nullptr;  // block h at rows + h * head_stride, [length, dim]
  int64_t head_stride = 0;
  int n_heads = 0, length = 0, dim = 0;
  float* norms = nullptr;  // [n_heads, length]
};

void row_norms(const RowNormsArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
