// Helpers for CUDA tests: skip without a GPU, bf16 round-trips, random data.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/model_config.h"
#include "kernels/cuda/cuda_utils.h"

#define KVB_REQUIRE_GPU()                                                         \
  do {                                                                            \
    if (!kvb::cuda::device_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

namespace kvb::test {

inline float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// A small model shape for random weights (engine/presets.h random_weights): 4 query heads on 2 KV
// heads, what the GPU engine tests set against the CPU engine.
inline ModelConfig small_random_model(const char* name, int n_layers, int d_model, int head_dim,
                                      int ffn_dim, int vocab_size) {
  ModelConfig config;
  config.name = name;
  config.n_layers = n_layers;
  config.d_model = d_model;
  config.n_query_heads = 4;
  config.n_kv_heads = 2;
  config.head_dim = head_dim;
  config.ffn_dim = ffn_dim;
  config.vocab_size = vocab_size;
  config.max_context = 4096;
  return config;
}

// Token ids (i * stride + offset) % vocab_size, i < count: a deterministic prompt.
inline std::vector<int32_t> strided_token_ids(int count, int stride, int offset, int vocab_size) {
  std::vector<int32_t> ids(count);
  for (int i = 0; i < count; ++i)
    ids[i] = static_cast<int32_t>((int64_t(i) * stride + offset) % vocab_size);
  return ids;
}

// Random values already representable in bf16, so CPU and GPU see identical inputs.
inline std::vector<float> random_bf16_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = round_bf16(dist(rng));
  return out;
}

inline cuda::DeviceBuffer to_device_bf16(const std::vector<float>& host) {
  std::vector<__nv_bfloat16> bits(host.size());
  for (size_t i = 0; i < host.size(); ++i) bits[i] = __float2bfloat16(host[i]);
  cuda::DeviceBuffer buffer(bits.size() * 2);
  buffer.upload(bits.data(), bits.size() * 2);
  return buffer;
}

template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& host) {
  cuda::DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.upload(host.data(), host.size() * sizeof(T));
  return buffer;
}

inline std::vector<float> from_device_bf16(const cuda::DeviceBuffer& buffer, size_t n) {
  std::vector<__nv_bfloat16> bits(n);
  buffer.download(bits.data(), n * 2);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(bits[i]);
  return out;
}

template <typename T>
std::vector<T> from_device(const cuda::DeviceBuffer& buffer, size_t n) {
  std::vector<T> out(n);
  buffer.download(out.data(), n * sizeof(T));
  return out;
}

// The largest |a[i] - b[i]|. Equal values (infinities included) and NaN against NaN count as 0; a
// NaN against a number, or vectors of different sizes, as infinity: std::max(x, NaN) returns x, so
// a plain maximum would pass a kernel that leaves NaN where the reference has a value.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    const double diff = std::abs(double(a[i]) - double(b[i]));
    worst = std::max(worst, std::isnan(diff) ? INFINITY : diff);
  }
  return worst;
}

}  // namespace kvb::test
