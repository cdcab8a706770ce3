// Element-wise activations and softmax.
#pragma once

#include <cstdint>

namespace kvb::kernels {

// out[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + e^-z). out may alias gate or up.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// In-place numerically stable softmax of x[0..n); returns log Σ exp(x) (the row log-sum-exp).
// Entries equal to -infinity get probability 0.
float softmax(float* x, int64_t n);

}  // namespace kvb::kernels
