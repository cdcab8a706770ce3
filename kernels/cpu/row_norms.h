// L2 norm of every row of a set of [length, dim] row blocks (KNorm's key norms, docs/methods.md
// §5): the contract the CUDA kernel (kernels/cuda/row_norms.h) is checked against
// (tests/cuda/row_norms_test.cc).
//
//   norms[h * length + j] = sqrt(Σ_i rows[h * head_stride + j * dim + i]²)
//
// Accumulated in f32 in index order (what the KNorm policy computed inline before).
#pragma once

#include <cstdint>

namespace kvb::kernels {

struct RowNormsArgs {
  const float* rows = nullptr;  // block h at rows + h * head_stride, [length, dim]
  int64_t head_stride = 0;
  int n_heads = 0, length = 0, dim = 0;
  float* norms = nullptr;  // [n_heads, length]
};

void row_norms(const RowNormsArgs& args);

}  // namespace kvb::kernels
