// Helpers of the decode-selector and ART tests: random caches and a double-precision reference
// attention over an index subset (the independent truth the selections are checked against).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/kv_store.h"

namespace kvb::test {

// A store of `length` entries per head with N(0, sigma^2) keys and values.
inline KvStore random_store(int layers, int kv_heads, int head_dim, int length, uint64_t seed,
                            float sigma = 1.0f) {
  KvStore store(layers, kv_heads, head_dim);
  store.reserve(length);
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> gaussian(0.0f, sigma);
  std::vector<float> k(static_cast<size_t>(kv_heads) * head_dim), v(k.size());
  for (int layer = 0; layer < layers; ++layer) {
    for (int t = 0; t < length; ++t) {
      for (float& x : k) x = gaussian(generator);
      for (float& x : v) x = gaussian(generator);
      store.append(layer, t, k.data(), v.data());
    }
  }
  return store;
}

inline std::vector<float> random_vector(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> gaussian(0.0f, sigma);
  std::vector<float> x(n);
  for (float& value : x) value = gaussian(generator);
  return x;
}

// softmax(q.k_j / sqrt(d) + bias_j) over `indices` (all entries when empty), times V; in double.
inline std::vector<double> reference_attention(const float* q, const float* keys,
                                               const float* values, int head_dim,
                                               const std::vector<int32_t>& indices,
                                               const std::vector<float>& bias = {}) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> logits(indices.size());
  double top = -INFINITY;
  for (size_t n = 0; n < indices.size(); ++n) {
    double dot = 0;
    for (int i = 0; i < head_dim; ++i)
      dot += static_cast<double>(q[i]) * keys[static_cast<int64_t>(indices[n]) * head_dim + i];
    logits[n] = dot * scale + (bias.empty() ? 0.0 : bias[n]);
    top = std::max(top, logits[n]);
  }
  std::vector<double> out(head_dim, 0.0);
  double mass = 0;
  for (size_t n = 0; n < indices.size(); ++n) {
    const double weight = std::exp(logits[n] - top);
    mass += weight;
    for (int i = 0; i < head_dim; ++i)
      out[i] += weight * values[static_cast<int64_t>(indices[n]) * head_dim + i];
  }
  for (double& x : out) x /= mass;
  return out;
}

inline std::vector<int32_t> all_indices(int n) {
  std::vector<int32_t> indices(n);
  for (int j = 0; j < n; ++j) indices[j] = j;
  return indices;
}

inline double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff / norm);
}

// A Selection sized for `n_query_heads`, as the engine hands it to select().
inline Selection empty_selection(int n_query_heads) {
  Selection selection;
  selection.indices.resize(n_query_heads);
  return selection;
}

}  // namespace kvb::test
