// SwiGLU kernel; contract: kernels/cuda/activations.h.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/activations.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"

namespace kvb::cuda {
namespace {

// silu(gate) * up for rows [gate | up] of width 2 ffn. Rows on the grid's y axis and 32-bit column
// indices: per element a 64-bit division and remainder cost more than the memory traffic (a 32K
// prefill has 470 M elements per layer). kWidth values per access: 8 (16-byte) when aligned,
// else 1.
template <int kWidth>
__global__ void swiglu_kernel(const __nv_bfloat16* gate_up, int n, int ffn, __nv_bfloat16* out) {
  using Chunk = std::conditional_t<kWidth == 8, int4, __nv_bfloat16>;
  wait_for_predecessor();
  allow_successor_launch();
  const int chunks = ffn / kWidth;
  for (int64_t row = blockIdx.y; row < n; row += gridDim.y) {
    const __nv_bfloat16* gate = gate_up + row * 2 * ffn;
    const __nv_bfloat16* up = gate + ffn;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += gridDim.x * blockDim.x) {
      Chunk g_chunk = reinterpret_cast<const Chunk*>(gate)[c];
      Chunk u_chunk = reinterpret_cast<const Chunk*>(up)[c];
      Chunk result;
      const auto* g = reinterpret_cast<const __nv_bfloat16*>(&g_chunk);
      const auto* u = reinterpret_cast<const __nv_bfloat16*>(&u_chunk);
      auto* r = reinterpret_cast<__nv_bfloat16*>(&result);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        const float gv = __bfloat162float(g[e]);
        r[e] = __float2bfloat16(gv / (1.f + __expf(-gv)) * __bfloat162float(u[e]));
      }
      reinterpret_cast<Chunk*>(out + row * ffn)[c] = result;
    }
  }
}

}  // namespace

void swiglu(const __nv_bfloat16* gate_up, int n, int ffn, __nv_bfloat16* out, cudaStream_t stream) {
  if (int64_t(n) * ffn == 0) return;
  const bool vectorized = ffn % 8 == 0 && aligned_to(16, gate_up, out);
  const int width = vectorized ? 8 : 1;
  constexpr int kThreads = 256;
  const dim3 grid((ffn / width + kThreads - 1) / kThreads, std::min(n, 65535));
  launch_overlapped(vectorized ? swiglu_kernel<8> : swiglu_kernel<1>, grid, kThreads, 0, stream,
                    "swiglu_kernel", gate_up, n, ffn, out);
}

}  // namespace kvb::cuda
