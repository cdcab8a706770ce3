#include "kernels/cpu/binary_hash.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/exact_dot.h"

namespace kvb::kernels {

uint64_t binary_hash_key(const float* projection, int head_dim, const float* key,
                         float* residual_norms) {
  std::vector<float> residual(key, key + head_dim);
  auto record = [&](int slot) {
    if (residual_norms)
      residual_norms[slot] =
          static_cast<float>(std::sqrt(exact_dot(residual.data(), residual.data(), head_dim)));
  };
  record(0);
  uint64_t code = 0;
  for (int i = 0; i < kBinaryHashBits; ++i) {
    const float* row = projection + static_cast<int64_t>(i) * head_dim;
    const double along = exact_dot(residual.data(), row, head_dim);
    if (along < 0) code |= uint64_t{1} << i;
    if (along != 0) {  // PyTorch's sign(0) = 0: an exact zero leaves the residual as it is
      const float sign = along > 0 ? 1.0f : -1.0f;
      for (int t = 0; t < head_dim; ++t) residual[t] -= sign * row[t];
    }
    record(i + 1);
  }
  return code;
}

void binary_hash_keys(const float* projection, int head_dim, const float* keys, int n,
                      uint64_t* codes) {
  for (int j = 0; j < n; ++j)
    codes[j] =
        binary_hash_key(projection, head_dim, keys + static_cast<int64_t>(j) * head_dim, nullptr);
}

float binary_hash_reconstruction_error(const float* projection, int head_dim, const float* key,
                                       uint64_t code) {
  double sum_sq = 0;
  for (int t = 0; t < head_dim; ++t) {
    double reconstructed = 0;
    for (int i = 0; i < kBinaryHashBits; ++i) {
      const double h = ((code >> i) & 1) ? -1.0 : 1.0;
      reconstructed += h * projection[static_cast<int64_t>(i) * head_dim + t];
    }
    const double diff = key[t] - reconstructed;
    sum_sq += diff * diff;
  }
  return static_cast<float>(std::sqrt(sum_sq));
}

void binary_project_queries(const float* projection, int head_dim, const float* queries,
                            int n_heads, float* projected) {
  for (int a = 0; a < n_heads; ++a) {
    for (int i = 0; i < kBinaryHashBits; ++i) {
      projected[a * kBinaryHashBits + i] =
          static_cast<float>(exact_dot(queries + static_cast<int64_t>(a) * head_dim,
                                       projection + static_cast<int64_t>(i) * head_dim, head_dim));
    }
  }
}

void quantize_query_group(const float* projected, int n_heads, QuantizedQuery* out) {
  float max_abs = 0;
  for (int e = 0; e < n_heads * kBinaryHashBits; ++e)
    max_abs = std::max(max_abs, std::fabs(projected[e]));
  const float scale = 127.0f / std::max(max_abs, 1e-6f);  // the PyTorch path's clamp
  for (int a = 0; a < n_heads; ++a) {
    QuantizedQuery& query = out[a];
    query = QuantizedQuery{};
    for (int i = 0; i < kBinaryHashBits; ++i) {
      // nearbyint in the default rounding mode rounds half to even, as torch.round does.
      const float rounded = std::nearbyint(projected[a * kBinaryHashBits + i] * scale);
      const int value = std::clamp(static_cast<int>(rounded), -127, 127);
      query.values[i] = static_cast<int8_t>(value);
      if (value < 0) query.sign_plane |= uint64_t{1} << i;
      const int magnitude = value < 0 ? -value : value;
      for (int b = 0; b < kQueryMagnitudePlanes; ++b)
        if ((magnitude >> b) & 1) query.magnitude[b] |= uint64_t{1} << i;
    }
  }
}

void binary_pack_queries(const float* projection, int head_dim, const float* queries, int n_heads,
                         QuantizedQuery* out) {
  std::vector<float> projected(static_cast<size_t>(n_heads) * kBinaryHashBits);
  binary_project_queries(projection, head_dim, queries, n_heads, projected.data());
  quantize_query_group(projected.data(), n_heads, out);
}

void binary_score_keys(const QuantizedQuery* queries, int n_heads, const uint64_t* codes, int n,
                       int* scores) {
  for (int j = 0; j < n; ++j) {
    int best = binary_hash_score(queries[0], codes[j]);
    for (int a = 1; a < n_heads; ++a)
      best = std::max(best, binary_hash_score(queries[a], codes[j]));
    scores[j] = best;
  }
}

namespace {

float sign_of(double x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }

// u = sign(R v) over the n rows of R.
void signs_along(const std::vector<float>& residual, int64_t n, int d, const float* v,
                 std::vector<float>& u) {
  for (int64_t i = 0; i < n; ++i) u[i] = sign_of(binary_fit_dot(residual.data() + i * d, v, d));
}

// One iteration in one pass over R: u = sign(R v) key by key, and v <- R^T u in f64, per block of
// kBinaryFitChunk keys in key order, then the blocks in order (u * r is exact, fused or not).
void iterate(const std::vector<float>& residual, int64_t n, int d, std::vector<float>& u,
             std::vector<double>& block, std::vector<double>& total, float* v) {
  std::fill(total.begin(), total.end(), 0.0);
  for (int64_t first = 0; first < n; first += kBinaryFitChunk) {
    std::fill(block.begin(), block.end(), 0.0);
    const int64_t last = std::min<int64_t>(first + kBinaryFitChunk, n);
    for (int64_t i = first; i < last; ++i) {
      const float* row = residual.data() + i * d;
      u[i] = sign_of(binary_fit_dot(row, v, d));
      const double sign = u[i];
      for (int j = 0; j < d; ++j) block[j] += sign * row[j];
    }
    for (int j = 0; j < d; ++j) total[j] += block[j];
  }
  for (int j = 0; j < d; ++j) v[j] = static_cast<float>(total[j]);
}

}  // namespace

void binary_fit_projection(const float* keys, int64_t n, int head_dim, const float* start,
                           const BinaryFitOptions& options, float* projection) {
  const int d = head_dim;
  std::vector<float> residual(keys, keys + n * d), u(n), v(d);
  std::vector<double> block(d), total(d);
  for (int bit = 0; bit < kBinaryHashBits; ++bit) {
    std::copy_n(start + static_cast<int64_t>(bit) * d, d, v.begin());
    for (int iteration = 0; iteration < options.iterations; ++iteration)
      iterate(residual, n, d, u, block, total, v.data());
    float* row = projection + static_cast<int64_t>(bit) * d;
    for (int j = 0; j < d; ++j) row[j] = v[j] / static_cast<float>(n);
    if (options.iterations == 0) signs_along(residual, n, d, v.data(), u);
    if (options.recompute_signs) signs_along(residual, n, d, row, u);
    for (int64_t i = 0; i < n; ++i)  // R <- R - u P[i]^T (u is -1, 0 or 1: one rounding)
      if (u[i] != 0)
        for (int j = 0; j < d; ++j) residual[i * d + j] -= u[i] * row[j];
  }
}

std::vector<float> binary_fit_starts(uint64_t seed, int head_dim) {
  std::vector<float> starts(static_cast<size_t>(kBinaryHashBits) * head_dim);
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> gaussian(0.0f, 1.0f);
  for (float& x : starts) x = gaussian(generator);
  return starts;
}

}  // namespace kvb::kernels
