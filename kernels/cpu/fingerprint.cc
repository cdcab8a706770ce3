#include "kernels/cpu/fingerprint.h"

namespace kvb::kernels {

uint64_t fingerprint_rows(const uint16_t* values, int64_t n) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += fingerprint_term(i, values[i]);
  return sum;
}

}  // namespace kvb::kernels
