#include "kernels/cpu/row_norms.h"

#include <cmath>

namespace kvb::kernels {

void row_norms(const RowNormsArgs& args) {
  for (int h = 0; h < args.n_heads; ++h) {
    for (int j = 0; j < args.length; ++j) {
      const float* row = args.rows + h * args.head_stride + static_cast<int64_t>(j) * args.dim;
      float squared = 0.0f;
      for (int i = 0; i < args.dim; ++i) squared += row[i] * row[i];
      args.norms[static_cast<int64_t>(h) * args.length + j] = std::sqrt(squared);
    }
  }
}

}  // namespace kvb::kernels
