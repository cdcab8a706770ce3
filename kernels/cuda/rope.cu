// Bias + RoPE kernel; contract: kernels/cuda/rope.h, the row's arithmetic: kernels/cuda/rope.cuh.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/rope.h"

namespace kvb::cuda {
namespace {

__global__ void apply_rope_kernel(RopeArgs args) {
  wait_for_predecessor();
  allow_successor_launch();
  apply_rope_row(args, blockIdx.x);
}

}  // namespace

void apply_rope(const RopeArgs& args, cudaStream_t stream) {
  if (args.n == 0) return;
  launch_overlapped(apply_rope_kernel, args.n, 256, 0, stream, "apply_rope_kernel", args);
}

}  // namespace kvb::cuda
