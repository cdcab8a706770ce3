#include "kernels/cpu/transformer_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"

namespace kvb::kernels {

void argmax_rows(const float* logits, int rows, int vocab, int32_t* next) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<int64_t>(r) * vocab;
    next[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // the first maximum
  }
}

void embedding_gather(const float* table, const int32_t* ids, int n, int d_model, float* residual) {
  for (int i = 0; i < n; ++i)
    std::copy_n(table + static_cast<int64_t>(ids[i]) * d_model, d_model,
                residual + static_cast<int64_t>(i) * d_model);
}

void append_kv(const float* qkv, int n, int rows_per_seq, int n_query_heads, int n_kv_heads,
               int head_dim, const int64_t* kv_offset, const int32_t* kv_length, float* k,
               float* v) {
  const int64_t width = static_cast<int64_t>(n_query_heads + 2 * n_kv_heads) * head_dim;
  for (int row = 0; row < n; ++row) {
    const int seq = row / rows_per_seq, within = row % rows_per_seq;
    const float* k_heads = qkv + row * width + static_cast<int64_t>(n_query_heads) * head_dim;
    const float* v_heads = k_heads + static_cast<int64_t>(n_kv_heads) * head_dim;
    for (int h = 0; h < n_kv_heads; ++h) {
      const int slot = seq * n_kv_heads + h;
      const int64_t at = (kv_offset[slot] + kv_length[slot] + within) * head_dim;
      std::copy_n(k_heads + static_cast<int64_t>(h) * head_dim, head_dim, k + at);
      std::copy_n(v_heads + static_cast<int64_t>(h) * head_dim, head_dim, v + at);
    }
  }
}

void rope_append_kv_decode(const RopeRows& rope, const int64_t* kv_offset, int32_t* kv_length,
                           float* k, float* v) {
  const int64_t width =
      static_cast<int64_t>(rope.n_query_heads + 2 * rope.n_kv_heads) * rope.head_dim;
  for (int r = 0; r < rope.n; ++r)  // Q and K heads, not V
    apply_rope(rope.qkv + r * width, rope.n_query_heads + rope.n_kv_heads, rope.head_dim,
               rope.head_dim, rope.positions[r], rope.inv_freq, rope.pairing);
  append_kv(rope.qkv, rope.n, 1, rope.n_query_heads, rope.n_kv_heads, rope.head_dim, kv_offset,
            kv_length, k, v);
  advance_lengths(kv_length, rope.n * rope.n_kv_heads, nullptr, 0, 1);
}

void advance_lengths(int32_t* lengths, int count, int32_t* positions, int n_positions, int delta) {
  for (int i = 0; i < count; ++i) lengths[i] += delta;
  for (int i = 0; i < n_positions; ++i) positions[i] += delta;
}

void copy_rows(const float* src, float* dst, const int64_t* src_rows, const int64_t* dst_rows,
               int64_t n_rows, int row_elems) {
  for (int64_t i = 0; i < n_rows; ++i)
    std::copy_n(src + src_rows[i] * row_elems, row_elems, dst + dst_rows[i] * row_elems);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void fill_random_bf16(uint16_t* out, size_t count, uint64_t seed, float scale) {
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = splitmix64(seed * 0x100000001B3ull + i);
    const float unit = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
    out[i] = f32_to_bf16((2.0f * unit - 1.0f) * scale);
  }
}

void gate_up_swiglu(const float* x, const float* w_gate_up, float* gate_up, float* out, int n,
                    int in_features, int ffn) {
  matmul(x, n, in_features, w_gate_up, 2 * int64_t{ffn}, nullptr, gate_up);
  for (int r = 0; r < n; ++r) {
    const float* gate = gate_up + static_cast<int64_t>(r) * 2 * ffn;
    swiglu(gate, gate + ffn, ffn, out + static_cast<int64_t>(r) * ffn);
  }
}

void lm_head_argmax(const float* x, const float* w, float* logits, int n, int in_features,
                    int vocab, int32_t* next) {
  matmul(x, n, in_features, w, vocab, nullptr, logits);
  argmax_rows(logits, n, vocab, next);
}

void fold_rmsnorm(const float* residual, int n, int d_model, const FoldedNorm& norm) {
  for (int r = 0; r < n; ++r) {
    const float* v = residual + static_cast<int64_t>(r) * d_model;
    float* scaled = norm.scaled + static_cast<int64_t>(r) * d_model;
    double sum_sq = 0;
    for (int j = 0; j < d_model; ++j) {
      sum_sq += static_cast<double>(v[j]) * v[j];
      scaled[j] = v[j] * norm.gain[j];
    }
    norm.sum_sq[r] = sum_sq;
  }
}

namespace {

// The rows the product after a folded norm multiplies: scaled / sqrt(Σv² / in_features + eps).
std::vector<float> normalised_rows(const FoldedNorm& x, int n, int in_features) {
  std::vector<float> rows(x.scaled, x.scaled + static_cast<int64_t>(n) * in_features);
  for (int r = 0; r < n; ++r) {
    const double inv_rms = 1.0 / std::sqrt(x.sum_sq[r] / in_features + x.eps);
    for (int j = 0; j < in_features; ++j)
      rows[static_cast<int64_t>(r) * in_features + j] *= static_cast<float>(inv_rms);
  }
  return rows;
}

}  // namespace

void matmul(const FoldedNorm& x, const float* w, float* y, int n, int in_features,
            int out_features) {
  matmul(normalised_rows(x, n, in_features).data(), n, in_features, w, out_features, nullptr, y);
}

void gate_up_swiglu(const FoldedNorm& x, const float* w_gate_up, float* gate_up, float* out, int n,
                    int in_features, int ffn) {
  gate_up_swiglu(normalised_rows(x, n, in_features).data(), w_gate_up, gate_up, out, n, in_features,
                 ffn);
}

void lm_head_argmax(const FoldedNorm& x, const float* w, float* logits, int n, int in_features,
                    int vocab, int32_t* next) {
  lm_head_argmax(normalised_rows(x, n, in_features).data(), w, logits, n, in_features, vocab, next);
}

void matmul_into_residual(const float* x, const float* w, float* residual, int n, int in_features,
                          int out_features, const FoldedNorm& next) {
  std::vector<float> product(static_cast<size_t>(n) * out_features);
  matmul(x, n, in_features, w, out_features, nullptr, product.data());
  for (size_t i = 0; i < product.size(); ++i) residual[i] += product[i];
  fold_rmsnorm(residual, n, out_features, next);
}

}  // namespace kvb::kernels
