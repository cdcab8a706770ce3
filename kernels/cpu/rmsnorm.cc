#include "kernels/cpu/rmsnorm.h"

#include <cmath>

namespace kvb::kernels {

void rmsnorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    double sum_squares = 0.0;  // double: a 4K-wide sum of squares loses digits in f32
    for (int64_t i = 0; i < dim; ++i) sum_squares += static_cast<double>(row[i]) * row[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_squares / dim + eps));
    float* out = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) out[i] = row[i] * inv_rms * weight[i];
  }
}

void add_rmsnorm(float* residual, const float* delta, const float* weight, int64_t rows,
                 int64_t dim, float eps, float* y) {
  if (delta != nullptr)
    for (int64_t i = 0; i < rows * dim; ++i) residual[i] += delta[i];
  rmsnorm(residual, weight, rows, dim, eps, y);
}

}  // namespace kvb::kernels
