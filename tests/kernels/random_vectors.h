// Seeded normal vectors for the kernel tests' inputs.
#pragma once

#include <random>
#include <vector>

namespace kvb::test {

inline std::vector<float> random_vector(std::mt19937& rng, size_t n, float sigma) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

}  // namespace kvb::test
