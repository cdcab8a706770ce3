// The sum of one float per thread over a whole thread block (at most 1,024 threads), returned to
// every thread: the row reductions of the norm kernels (rmsnorm.cu, and the folded norm that
// starts a decode step's chain in transformer_ops.cu).
#pragma once

namespace kvb::cuda {

__device__ __forceinline__ float block_sum(float value) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off /= 2) value += __shfl_xor_sync(0xffffffff, value, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  value = lane < warps ? partial[lane] : 0.f;
  for (int off = 16; off > 0; off /= 2) value += __shfl_xor_sync(0xffffffff, value, off);
  __syncthreads();
  return value;
}

}  // namespace kvb::cuda
