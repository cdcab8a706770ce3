// CriticalKV's output-aware value norms ν[h, j] = (1/g) Σ_{a∈group(h)} ‖v_j W_o^a‖₁ of every cached
// token, computed where the cache and W_o live so that only [n_kv_heads, length] floats leave the
// device (neither the prompt's values nor W_o). Per query head a, one cuBLAS product of a chunk of
// value rows with W_o's columns of head a (bf16 in, f32 out, into `workspace`), then the rows' L1
// norms added into ν. CPU twin and contract: kernels/cpu/projected_value_norms.h.
// Test: tests/cuda/projected_value_norms_test.cc.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

struct ProjectedValueNormsArgs {
  const __nv_bfloat16* values = nullptr;  // block h at values + h * head_stride, [length, dim]
  int64_t head_stride = 0;
  const __nv_bfloat16* output_projection = nullptr;  // [hidden, n_query_heads * dim] row-major
  int n_query_heads = 0, n_kv_heads = 0, length = 0, dim = 0, hidden = 0;
  float* norms = nullptr;      // [n_kv_heads, length], overwritten
  float* workspace = nullptr;  // projected_value_norms_workspace_floats(hidden) floats
};

// Value rows per product: the workspace holds [kProjectedRows, hidden] f32.
inline constexpr int kProjectedRows = 4096;
inline int64_t projected_value_norms_workspace_floats(int hidden) {
  return int64_t(kProjectedRows) * hidden;
}

void projected_value_norms(cublasHandle_t handle, const ProjectedValueNormsArgs& args,
                           cudaStream_t stream);

}  // namespace kvb::cuda
