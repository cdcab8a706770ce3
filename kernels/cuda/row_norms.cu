#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/row_norms.h"

namespace kvb::cuda {
namespace {

// One warp per row: lanes stride over the row, then a butterfly sum.
__global__ void row_norms_kernel(RowNormsArgs a) {
  const int warps_per_block = blockDim.x / 32;
  const int64_t row = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int h = blockIdx.y;
  if (row >= a.length) return;
  const __nv_bfloat16* x = a.rows + h * a.head_stride + row * a.dim;
  float squared = 0.f;
  for (int i = lane; i < a.dim; i += 32) {
    const float v = __bfloat162float(x[i]);
    squared += v * v;
  }
  for (int offset = 16; offset > 0; offset /= 2)
    squared += __shfl_xor_sync(0xffffffffu, squared, offset);
  if (lane == 0) a.norms[int64_t(h) * a.length + row] = sqrtf(squared);
}

}  // namespace

void row_norms(const RowNormsArgs& args, cudaStream_t stream) {
  if (args.length <= 0 || args.n_heads <= 0) return;
  constexpr int kThreads = 256;
  const dim3 grid((args.length + kThreads / 32 - 1) / (kThreads / 32), args.n_heads);
  row_norms_kernel<<<grid, kThreads, 0, stream>>>(args);
  check(cudaGetLastError(), "row_norms_kernel");
}

}  // namespace kvb::cuda
