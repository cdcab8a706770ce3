#include "kernels/cpu/query_key_scores.h"

#include <cmath>
#include <cstdint>

namespace kvb::kernels {

void query_key_scores(const float* query, const float* keys, int length, int dim, float* scores) {
  for (int j = 0; j < length; ++j) {
    const float* key = keys + static_cast<int64_t>(j) * dim;
    float dot = 0;
    // Fused multiply-adds, as the device does: both round the same way whatever the compiler
    // contracts elsewhere.
    for (int i = 0; i < dim; ++i) dot = std::fma(query[i], key[i], dot);
    scores[j] = dot;
  }
}

}  // namespace kvb::kernels
