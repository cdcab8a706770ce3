// The dot product of two f32 vectors summed in f64 in index order: each product is exact, so the
// sum depends on no compiler's choice of order, and a sign decided from it (a hash bit) can be
// reproduced by a device twin that sums the same products in the same order
// (kernels/cpu/binary_hash.h, kernels/cpu/lsh_sampling.h).
#pragma once

namespace kvb::kernels {

inline double exact_dot(const float* a, const float* b, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

}  // namespace kvb::kernels
