// One causal attention row in double: the tests' independent reference for what the kernels
// derive from the rows' log-sum-exp.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvb::test {

// p[j] = softmax_j(scale · q · k_j) over keys j < seen (rows of d floats at `keys`); returns the
// row's natural-log log-sum-exp.
inline double softmax_row(const float* q, const float* keys, int seen, int d, double scale,
                          std::vector<double>& p) {
  p.assign(seen, 0.0);
  for (int j = 0; j < seen; ++j) {
    for (int c = 0; c < d; ++c) p[j] += double(q[c]) * keys[int64_t(j) * d + c];
    p[j] *= scale;
  }
  const double top = *std::max_element(p.begin(), p.end());
  double z = 0;
  for (auto& x : p) z += (x = std::exp(x - top));
  for (auto& x : p) x /= z;
  return top + std::log(z);
}

}  // namespace kvb::test
