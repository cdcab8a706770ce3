// Device twin of kernels/cpu/fingerprint.h's fingerprint_rows: the same value per slot, its terms
// added in whatever order the threads finish (a sum modulo 2^64 does not depend on it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

// out[s] = fingerprint_rows of the `per_slot` elements at rows[s] (a device array of n_slots
// pointers), read as their 16 bits. `out` is device memory; the op clears it first.
void fingerprint_rows(const __nv_bfloat16* const* rows, int n_slots, int64_t per_slot,
                      uint64_t* out, cudaStream_t stream);

}  // namespace kvb::cuda
