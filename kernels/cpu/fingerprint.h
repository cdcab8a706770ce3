// Content fingerprints of cached rows: a 64-bit value that changes with any element's bits or
// position, to recognise a cache seen before (engine/cuda/cuda_sparse_decode.cu reuses a
// projection fit when the prompt's keys are the same). It is the sum modulo 2^64, over the
// elements, of SplitMix64's output function applied to (index << 16 | bits): a sum, so the device
// twin (kernels/cuda/fingerprint.h, the same name) may add its terms in any order and still get
// the same value. Not a cryptographic hash.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVB_FINGERPRINT_HOST_DEVICE __host__ __device__
#else
#define KVB_FINGERPRINT_HOST_DEVICE
#endif

namespace kvb::kernels {

// SplitMix64's output for a state advanced to x + the golden gamma (Steele, Lea and Flood,
// "Fast splittable pseudorandom number generators", OOPSLA 2014): fingerprint_mix(0) is the
// generator's first output from seed 0.
KVB_FINGERPRINT_HOST_DEVICE inline uint64_t fingerprint_mix(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One element's term: its index within the rows and its 16 bits (bf16 or f16).
KVB_FINGERPRINT_HOST_DEVICE inline uint64_t fingerprint_term(int64_t index, uint16_t bits) {
  return fingerprint_mix((static_cast<uint64_t>(index) << 16) | bits);
}

// The fingerprint of n 16-bit elements (a slot's rows, row after row).
uint64_t fingerprint_rows(const uint16_t* values, int64_t n);

// Folds `value` into a running fingerprint `seed` in order (for combining fields on the host).
inline uint64_t fingerprint_combine(uint64_t seed, uint64_t value) {
  return fingerprint_mix(seed ^ fingerprint_mix(value));
}

}  // namespace kvb::kernels
