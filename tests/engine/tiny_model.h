// Test helpers: a tiny Llama-shaped model with random weights, and an independent naive forward
// pass in double precision (full sequence, no cache, textbook loops) to check the engine against.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/kv_store.h"
#include "engine/weights.h"

namespace kvb::test {

inline std::vector<float> random_vector(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// n token ids drawn uniformly from [0, vocab) with `seed`.
inline std::vector<int32_t> random_token_ids(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = pick(rng);
  return ids;
}

struct TinyShape {
  int n_layers = 2, d_model = 32, n_query_heads = 4, n_kv_heads = 2, head_dim = 8, ffn_dim = 48;
  int vocab = 61, max_context = 256;
  bool qkv_bias = false, tied = true, interleaved = false, llama3 = false;
};

inline ModelWeights tiny_model(const TinyShape& s, unsigned seed) {
  std::mt19937 rng(seed);
  ModelWeights w;
  ModelConfig& c = w.config;
  c.name = "tiny-test";
  c.n_layers = s.n_layers;
  c.d_model = s.d_model;
  c.n_query_heads = s.n_query_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim;
  c.ffn_dim = s.ffn_dim;
  c.vocab_size = s.vocab;
  c.max_context = s.max_context;
  c.rope_theta = 100.0f;  // short wavelengths so that positions in a short test matter
  c.qkv_bias = s.qkv_bias;
  c.tied_embeddings = s.tied;
  c.rope_interleaved_pairs = s.interleaved;
  if (s.llama3) c.llama3_rope_scaling = Llama3RopeScaling{4.0f, 1.0f, 4.0f, 64};
  const int D = s.d_model, q = s.n_query_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  const float ws = 1.0f / std::sqrt(static_cast<float>(D));
  w.token_embedding = random_vector(rng, static_cast<size_t>(s.vocab) * D, 1.0f);
  w.output_norm = random_vector(rng, D, 0.1f);
  for (auto& x : w.output_norm) x += 1.0f;
  if (!s.tied) w.output = random_vector(rng, static_cast<size_t>(s.vocab) * D, ws);
  for (int l = 0; l < s.n_layers; ++l) {
    LayerWeights L;
    L.attn_norm = random_vector(rng, D, 0.1f);
    L.ffn_norm = random_vector(rng, D, 0.1f);
    for (auto& x : L.attn_norm) x += 1.0f;
    for (auto& x : L.ffn_norm) x += 1.0f;
    L.wq = random_vector(rng, static_cast<size_t>(q) * D, 2 * ws);
    L.wk = random_vector(rng, static_cast<size_t>(kv) * D, 2 * ws);
    L.wv = random_vector(rng, static_cast<size_t>(kv) * D, ws);
    if (s.qkv_bias) {
      L.bq = random_vector(rng, q, 0.2f);
      L.bk = random_vector(rng, kv, 0.2f);
      L.bv = random_vector(rng, kv, 0.2f);
    }
    L.wo = random_vector(rng, static_cast<size_t>(D) * q, ws);
    L.w_gate = random_vector(rng, static_cast<size_t>(s.ffn_dim) * D, ws);
    L.w_up = random_vector(rng, static_cast<size_t>(s.ffn_dim) * D, ws);
    L.w_down =
        random_vector(rng, static_cast<size_t>(D) * s.ffn_dim, 1.0f / std::sqrt(float(s.ffn_dim)));
    w.layers.push_back(std::move(L));
  }
  w.source = "test:tiny";
  return w;
}

// x rounded to nearest (ties to even) with `bits` significant bits: 11 is f16, 8 is bf16 (normal
// range; the tests' values stay inside it). Independent of the engine's conversions.
inline double round_to_significant_bits(double x, int bits) {
  if (x == 0) return x;
  const int exponent = std::ilogb(x) - (bits - 1);
  return std::ldexp(std::nearbyint(std::ldexp(x, -exponent)), exponent);
}

// Which positions each layer/KV head may attend to, besides causality. Empty = all.
// allowed[layer][kv_head] is a sorted list of positions.
using AllowedPositions = std::vector<std::vector<std::vector<int>>>;

// The keys (after RoPE) and values of every layer and token [layer][t][Hkv * head_dim].
struct ReferenceKv {
  std::vector<std::vector<std::vector<double>>> keys, values;
};

// The share of the engine's keys and values (every layer and token) equal to the reference's.
inline double share_of_kv_equal(KvStore& store, const ReferenceKv& reference) {
  store.widen();
  const int d = store.head_dim();
  int64_t equal = 0, total = 0;
  for (int l = 0; l < store.n_layers(); ++l)
    for (int h = 0; h < store.n_kv_heads(); ++h)
      for (int t = 0; t < store.length(l, h); ++t)
        for (int i = 0; i < d; ++i) {
          equal += store.keys(l, h)[t * d + i] == reference.keys[l][t][h * d + i];
          equal += store.values(l, h)[t * d + i] == reference.values[l][t][h * d + i];
          total += 2;
        }
  return static_cast<double>(equal) / static_cast<double>(total);
}

// Naive forward of the whole sequence; returns logits for every position [T][vocab].
// When `allowed` is given, query t attends to allowed positions < t0 plus every position in
// [t0, t] (the cache was compressed to `allowed` after the first t0 tokens). With `kv_bits` > 0,
// every key (after RoPE) and value is rounded to that many significant bits, as a 16-bit cache
// holds them. With `bf16_device`, values are rounded to bf16 (8 significant bits) where the CUDA
// prefill stores them in bf16: every weight; the embeddings; each norm's output; each product's
// output, before the bias (and again after it); Q and K after RoPE (its angle the f32 product
// position · inv_freq); the attention's probabilities relative to the running maximum of their
// 64-key tiles (128 for head_dim 128) in P·V, and its output; SwiGLU's output. The residual
// stream and the logits are not rounded. `kv`, when given, receives the keys and values.
inline std::vector<std::vector<double>> reference_logits(
    const ModelWeights& w, const std::vector<int>& ids, const AllowedPositions& allowed = {},
    int t0 = 0, int kv_bits = 0, bool bf16_device = false, ReferenceKv* kv = nullptr) {
  const ModelConfig& c = w.config;
  const int T = static_cast<int>(ids.size()), D = c.d_model, d = c.head_dim;
  const int Hq = c.n_query_heads, Hkv = c.n_kv_heads, F = c.ffn_dim;
  auto device = [&](double x) { return bf16_device ? round_to_significant_bits(x, 8) : x; };
  auto device_all = [&](std::vector<double> x) {
    for (double& e : x) e = device(e);
    return x;
  };
  auto rms = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = device(x[i] * inv * device(g[i]));
    return y;
  };
  // The LM head's output (`bf16_output` false) stays f32 on the device.
  auto linear = [&](const WeightMatrix& matrix, const std::vector<float>& b, int out,
                    const std::vector<double>& x, bool bf16_output = true) {
    const std::vector<float> W = matrix.to_f32();
    std::vector<double> y(out);
    for (int r = 0; r < out; ++r) {
      double s = bf16_device || b.empty() ? 0.0 : b[r];
      for (size_t i = 0; i < x.size(); ++i) s += device(W[r * x.size() + i]) * x[i];
      if (bf16_device && !b.empty()) s = device(s) + device(b[r]);  // bias after the rounding
      y[r] = bf16_output ? device(s) : s;
    }
    return y;
  };
  std::vector<double> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) {
    double f = std::pow(double(c.rope_theta), -2.0 * i / d);
    if (c.llama3_rope_scaling) {
      const auto& s = *c.llama3_rope_scaling;
      const double wl = 2 * M_PI / f, lo = s.original_max_position / s.low_freq_factor,
                   hi = s.original_max_position / s.high_freq_factor;
      if (wl > lo) {
        f /= s.factor;
      } else if (wl >= hi) {
        const double sm = (s.original_max_position / wl - s.low_freq_factor) /
                          (s.high_freq_factor - s.low_freq_factor);
        f = (1 - sm) * f / s.factor + sm * f;
      }
    }
    inv_freq[i] = f;
  }
  auto rope = [&](std::vector<double>& v, int offset, int pos) {
    for (int i = 0; i < d / 2; ++i) {
      const int a = c.rope_interleaved_pairs ? offset + 2 * i : offset + i;
      const int b = c.rope_interleaved_pairs ? offset + 2 * i + 1 : offset + i + d / 2;
      const double ang = bf16_device ? double(float(pos) * float(inv_freq[i])) : pos * inv_freq[i];
      const double x0 = v[a], x1 = v[b];
      v[a] = device(x0 * std::cos(ang) - x1 * std::sin(ang));
      v[b] = device(x0 * std::sin(ang) + x1 * std::cos(ang));
    }
  };
  std::vector<std::vector<double>> x(T, std::vector<double>(D));
  const std::vector<float> embedding = w.token_embedding.to_f32();
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < D; ++i) x[t][i] = device(embedding[size_t(ids[t]) * D + i]);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const auto n = rms(x[t], L.attn_norm);
      q[t] = linear(L.wq, L.bq, Hq * d, n);
      k[t] = linear(L.wk, L.bk, Hkv * d, n);
      v[t] = linear(L.wv, L.bv, Hkv * d, n);
      for (int h = 0; h < Hq; ++h) rope(q[t], h * d, t);
      for (int h = 0; h < Hkv; ++h) rope(k[t], h * d, t);
      for (auto* row : {&k[t], &v[t]})
        for (double& e : *row)
          if (kv_bits > 0) e = round_to_significant_bits(e, kv_bits);
    }
    if (kv != nullptr) {
      kv->keys.push_back(k);
      kv->values.push_back(v);
    }
    for (int t = 0; t < T; ++t) {
      std::vector<double> o(Hq * d, 0.0);
      for (int a = 0; a < Hq; ++a) {
        const int h = a / (Hq / Hkv);
        std::vector<int> keys;
        for (int j = 0; j <= t; ++j) {
          bool ok = true;
          if (!allowed.empty() && t >= t0 && j < t0) {
            const auto& keep = allowed[l][h];
            ok = std::binary_search(keep.begin(), keep.end(), j);
          }
          if (ok) keys.push_back(j);
        }
        std::vector<double> s;
        double mx = -1e300;
        for (int j : keys) {
          double dotp = 0;
          for (int i = 0; i < d; ++i) dotp += q[t][a * d + i] * k[j][h * d + i];
          s.push_back(dotp / std::sqrt(double(d)));
          mx = std::max(mx, s.back());
        }
        // The device's running maximum of the logits over its key tiles up to each key's.
        const int tile = d == 128 ? 128 : 64;
        std::vector<double> running_max(s.size());
        double so_far = -1e300;
        for (size_t n = 0; n < keys.size(); ++n) {
          if (n % tile == 0)
            for (size_t m = n; m < std::min(keys.size(), n + tile); ++m)
              so_far = std::max(so_far, s[m]);
          running_max[n] = so_far;
        }
        double z = 0;
        for (size_t n = 0; n < keys.size(); ++n) {
          const double p = std::exp(s[n] - mx);
          z += p;
          const double tile_max = running_max[n];
          s[n] = bf16_device ? device(std::exp(s[n] - tile_max)) * std::exp(tile_max - mx) : p;
        }
        for (size_t n = 0; n < keys.size(); ++n)
          for (int i = 0; i < d; ++i) o[a * d + i] += s[n] / z * v[keys[n]][h * d + i];
      }
      o = device_all(o);
      const auto proj = linear(L.wo, {}, D, o);
      for (int i = 0; i < D; ++i) x[t][i] += proj[i];
      const auto n = rms(x[t], L.ffn_norm);
      auto g = linear(L.w_gate, {}, F, n);
      const auto u = linear(L.w_up, {}, F, n);
      for (int i = 0; i < F; ++i) g[i] = device(g[i] / (1 + std::exp(-g[i])) * u[i]);
      const auto down = linear(L.w_down, {}, D, g);
      for (int i = 0; i < D; ++i) x[t][i] += down[i];
    }
  }
  std::vector<std::vector<double>> logits(T);
  for (int t = 0; t < T; ++t)
    logits[t] = linear(w.output_matrix(), {}, c.vocab_size, rms(x[t], w.output_norm), false);
  return logits;
}

}  // namespace kvb::test
