#include "kernels/cpu/activations.h"

#include <cmath>
#include <limits>

namespace kvb::kernels {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

float softmax(float* x, int64_t n) {
  float max_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max_value = x[i] > max_value ? x[i] : max_value;
  if (n == 0 || max_value == -std::numeric_limits<float>::infinity()) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return -std::numeric_limits<float>::infinity();
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return max_value + static_cast<float>(std::log(sum));
}

}  // namespace kvb::kernels
