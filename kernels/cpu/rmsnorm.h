// RMSNorm (Llama family): y = x / sqrt(mean(x^2) + eps) * weight, row by row.
#pragma once

#include <cstdint>

namespace kvb::kernels {

// x, y: [rows, dim] (may alias); weight: [dim].
void rmsnorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y);

// residual += delta (when delta != nullptr), then y = rmsnorm(residual): the residual stream's
// step between two blocks, in one call as the CUDA twin (kernels/cuda/rmsnorm.h) fuses it.
// residual, delta, y: [rows, dim].
void add_rmsnorm(float* residual, const float* delta, const float* weight, int64_t rows,
                 int64_t dim, float eps, float* y);

}  // namespace kvb::kernels
