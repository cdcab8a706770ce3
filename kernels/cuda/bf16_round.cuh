// The device twin of kernels/cpu/dequantize.h's scalar round_to_bf16: x rounded to the nearest
// bf16 (ties to even) and widened back, the value a bf16 buffer would hold. The kernels that
// follow a reference's bf16 casts (window sums, DropKV's p, decode eviction's probabilities) use
// it, so that the rounding is written once.
#pragma once

#include <cuda_bf16.h>

namespace kvb::cuda {

__device__ __forceinline__ float round_to_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

}  // namespace kvb::cuda
