#include "kernels/cpu/transformer_ops.h"

#include <algorithm>

namespace kvb::kernels {

void argmax_rows(const float* logits, int rows, int vocab, int32_t* next) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<int64_t>(r) * vocab;
    next[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // the first maximum
  }
}

}  // namespace kvb::kernels
