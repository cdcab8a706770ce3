// RMSNorm (Llama family): y = x / sqrt(mean(x^2) + eps) * weight, row by row.
#pragma once

#include <cstdint>

namespace kvb::kernels {

// x, y: [rows, dim] (may alias); weight: [dim].
void rmsnorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y);

}  // namespace kvb::kernels
