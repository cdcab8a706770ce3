#include <algorithm>

#include "kernels/cpu/fingerprint.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/fingerprint.h"

namespace kvb::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void fingerprint_kernel(const __nv_bfloat16* const* rows, int64_t per_slot,
                                   unsigned long long* out) {
  const int slot = blockIdx.y;
  const uint16_t* values = reinterpret_cast<const uint16_t*>(rows[slot]);
  uint64_t sum = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < per_slot;
       i += int64_t(gridDim.x) * kThreads)
    sum += kernels::fingerprint_term(i, values[i]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) atomicAdd(out + slot, static_cast<unsigned long long>(sum));
}

}  // namespace

void fingerprint_rows(const __nv_bfloat16* const* rows, int n_slots, int64_t per_slot,
                      uint64_t* out, cudaStream_t stream) {
  if (n_slots <= 0) return;
  check(cudaMemsetAsync(out, 0, size_t(n_slots) * sizeof(uint64_t), stream), "fingerprint memset");
  if (per_slot <= 0) return;
  const int64_t blocks = std::min<int64_t>((per_slot + kThreads - 1) / kThreads, 1024);
  fingerprint_kernel<<<dim3(unsigned(blocks), unsigned(n_slots)), kThreads, 0, stream>>>(
      rows, per_slot, reinterpret_cast<unsigned long long*>(out));
  check(cudaGetLastError(), "fingerprint_rows launch");
}

}  // namespace kvb::cuda
