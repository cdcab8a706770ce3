// SwiGLU on the GPU, bf16 in and out with f32 math. CPU twin: kernels/cpu/activations.h. Test:
// tests/cuda/backend_ops_test.cc. The decode step's fusion with the gate/up product:
// gate_up_swiglu in kernels/cuda/transformer_ops.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace kvb::cuda {

// out[i, j] = silu(gate_up[i, j]) * gate_up[i, ffn + j]  (gate and up fused in one [n, 2 ffn]).
void swiglu(const __nv_bfloat16* gate_up, int n, int ffn, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace kvb::cuda
