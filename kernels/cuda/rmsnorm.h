// RMSNorm of the residual stream on the GPU, bf16 out with f32 math. CPU twin:
// kernels/cpu/rmsnorm.h (add_rmsnorm, in f32). Test:
// tests/cuda/backend_ops_test.cc. The decode step's norms folded into the products around them:
// FoldedNorm in kernels/cuda/transformer_ops.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace kvb::cuda {

// residual += delta (when delta != nullptr); out = rmsnorm(residual) * weight, in bf16.
void add_rmsnorm(float* residual, const __nv_bfloat16* delta, const __nv_bfloat16* weight, int n,
                 int d_model, float eps, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace kvb::cuda
