// The CPU twins of kernels/cuda/transformer_ops.h (kernels/cpu/transformer_ops.h) against rows
// written by hand or the definition spelled out: argmax with ties, the gathers and the cache
// append, the seeded generator against SplitMix64's published first outputs, and the fused
// products against the unfused ops they stand for.
#include "kernels/cpu/transformer_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"

namespace kvb::kernels {
namespace {

TEST(ArgmaxRows, PicksEachRowsLargestEntryAndTheLowestIndexOfATie) {
  const float inf = INFINITY;
  const std::vector<float> logits = {0.5f,  2.0f,  -1.0f, 2.0f,   // tie: 1 and 3
                                     -3.0f, -2.0f, -7.0f, -2.5f,  // all negative
                                     -inf,  -inf,  -inf,  -inf,   // nothing finite
                                     1.0f,  1.0f,  1.0f,  9.0f};  // the last entry
  std::vector<int32_t> next(4, -1);
  argmax_rows(logits.data(), 4, 4, next.data());
  EXPECT_EQ(next, (std::vector<int32_t>{1, 1, 0, 3}));
}

TEST(EmbeddingGather, CopiesTheRowOfEachId) {
  const std::vector<float> table = {0, 1, 2, 10, 11, 12, 20, 21, 22};
  const std::vector<int32_t> ids = {2, 0, 2};
  std::vector<float> residual(9, -1);
  embedding_gather(table.data(), ids.data(), 3, 3, residual.data());
  EXPECT_EQ(residual, (std::vector<float>{20, 21, 22, 0, 1, 2, 20, 21, 22}));
}

// One query head and two KV heads of width 2: qkv row r is [q q | k0 k0 k1 k1 | v0 v0 v1 v1].
std::vector<float> qkv_rows(int rows) {
  std::vector<float> qkv;
  for (int r = 0; r < rows; ++r)
    for (float part : {0.f, 10.f, 20.f})
      for (int j = 0; j < (part == 0.f ? 2 : 4); ++j) qkv.push_back(100.f * (r + 1) + part + j);
  return qkv;
}

TEST(AppendKv, PlacesRowsAtEachHeadsOffsetPlusLength) {
  const std::vector<float> qkv = qkv_rows(2);
  // A prefill of two rows into one sequence: head 0 at offset 0, length 1; head 1 at 4, length 0.
  const std::vector<int64_t> offsets = {0, 4};
  const std::vector<int32_t> lengths = {1, 0};
  std::vector<float> k(16, 0), v(16, 0);
  append_kv(qkv.data(), 2, 2, 1, 2, 2, offsets.data(), lengths.data(), k.data(), v.data());
  EXPECT_EQ(k, (std::vector<float>{0, 0, 110, 111, 210, 211, 0, 0,  //
                                   112, 113, 212, 213, 0, 0, 0, 0}));
  EXPECT_EQ(v, (std::vector<float>{0, 0, 120, 121, 220, 221, 0, 0,  //
                                   122, 123, 222, 223, 0, 0, 0, 0}));
  // A decode step of two sequences (one row each, two heads each): slots offset + length.
  const std::vector<int64_t> seq_offsets = {0, 2, 4, 6};
  const std::vector<int32_t> seq_lengths = {0, 1, 1, 0};
  std::fill(k.begin(), k.end(), 0.f);
  append_kv(qkv.data(), 2, 1, 1, 2, 2, seq_offsets.data(), seq_lengths.data(), k.data(), v.data());
  EXPECT_EQ(k, (std::vector<float>{110, 111, 0, 0, 0, 0, 112, 113,  //
                                   0, 0, 210, 211, 212, 213, 0, 0}));
}

// Position 0 leaves a row as it is; position 1 with inverse frequency 1 turns each (x[i], x[i+1])
// pair (halves pairing, head_dim 2) by one radian. V is appended as given; lengths advance.
TEST(RopeAppendKvDecode, RotatesAppendsAndAdvances) {
  std::vector<float> qkv = qkv_rows(2);
  const std::vector<float> before = qkv;
  const std::vector<int32_t> positions = {0, 1};
  const float inv_freq = 1.f;
  const std::vector<int64_t> offsets = {0, 2, 4, 6};
  std::vector<int32_t> lengths = {0, 1, 1, 0};
  std::vector<float> k(16, 0), v(16, 0);
  rope_append_kv_decode({.qkv = qkv.data(),
                         .positions = positions.data(),
                         .inv_freq = &inv_freq,
                         .n = 2,
                         .n_query_heads = 1,
                         .n_kv_heads = 2,
                         .head_dim = 2},
                        offsets.data(), lengths.data(), k.data(), v.data());
  EXPECT_EQ(lengths, (std::vector<int32_t>{1, 2, 2, 1}));
  for (int j = 0; j < 10; ++j) EXPECT_EQ(qkv[j], before[j]) << "row 0 at position 0";
  const float c = std::cos(1.f), s = std::sin(1.f);
  for (int head = 0; head < 3; ++head) {  // Q, K0, K1 of row 1
    const float x0 = before[10 + 2 * head], x1 = before[10 + 2 * head + 1];
    EXPECT_NEAR(qkv[10 + 2 * head], x0 * c - x1 * s, 1e-3) << "head " << head;
    EXPECT_NEAR(qkv[10 + 2 * head + 1], x0 * s + x1 * c, 1e-3) << "head " << head;
  }
  EXPECT_EQ(k[10], qkv[12]);  // sequence 1, head 0: slot offset 4 + length 1
  EXPECT_EQ(k[12], qkv[14]);  // sequence 1, head 1: slot offset 6 + length 0
  EXPECT_EQ(v[10], 220.f);    // V as given
  EXPECT_EQ(k[0], 110.f);     // sequence 0, head 0 at position 0: unrotated
}

TEST(AdvanceLengths, AddsDeltaToEachCount) {
  std::vector<int32_t> lengths = {1, 2, 3}, positions = {7, 8};
  advance_lengths(lengths.data(), 2, positions.data(), 2, 5);
  EXPECT_EQ(lengths, (std::vector<int32_t>{6, 7, 3}));
  EXPECT_EQ(positions, (std::vector<int32_t>{12, 13}));
  advance_lengths(lengths.data(), 3, nullptr, 0, -1);
  EXPECT_EQ(lengths, (std::vector<int32_t>{5, 6, 2}));
}

TEST(CopyRows, GathersRowsToTheirDestinations) {
  const std::vector<float> src = {0, 1, 10, 11, 20, 21};
  const std::vector<int64_t> from = {2, 0}, to = {0, 2};
  std::vector<float> dst(6, -1);
  copy_rows(src.data(), dst.data(), from.data(), to.data(), 2, 2);
  EXPECT_EQ(dst, (std::vector<float>{20, 21, -1, -1, 0, 1}));
}

// The published first outputs of SplitMix64 seeded with 0 (state += γ, then the finaliser).
TEST(FillRandomBf16, DrawsFromSplitMix64) {
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  uint16_t first = 0;
  fill_random_bf16(&first, 1, 0, 2.f);  // seed 0, index 0: mix(0), top 24 bits 0xE220A8
  EXPECT_EQ(first, f32_to_bf16((2.f * (0xE220A8 / 16777216.f) - 1.f) * 2.f));
}

// Uniform in [-scale, scale): mean 0 and variance scale²/3 within sampling error; the same values
// for the same seed, others for another.
TEST(FillRandomBf16, IsUniformAndDeterministicPerSeed) {
  const size_t n = 200000;
  const float scale = 0.5f;
  std::vector<uint16_t> a(n), b(n), c(n);
  fill_random_bf16(a.data(), n, 42, scale);
  fill_random_bf16(b.data(), n, 42, scale);
  fill_random_bf16(c.data(), n, 43, scale);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sum = 0, sum_sq = 0;
  for (uint16_t bits : a) {
    const double x = bf16_to_f32(bits);
    ASSERT_LE(std::abs(x), scale);
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 5 * scale / std::sqrt(3.0 * n));  // five standard errors
  EXPECT_NEAR(sum_sq / n, scale * scale / 3, 0.01 * scale * scale);
}

TEST(GateUpSwiglu, IsSwigluOfTheGateAndUpProducts) {
  const std::vector<float> x = {1, 2};
  const std::vector<float> w = {1, 0, 0, 1, 0, 1, 1, 1};  // gate rows [1 0], [0 1]; up [0 1], [1 1]
  std::vector<float> gate_up(4), out(2);
  gate_up_swiglu(x.data(), w.data(), gate_up.data(), out.data(), 1, 2, 2);
  EXPECT_EQ(gate_up, (std::vector<float>{1, 2, 2, 3}));
  auto silu = [](float z) { return z / (1 + std::exp(-z)); };
  EXPECT_FLOAT_EQ(out[0], silu(1) * 2);
  EXPECT_FLOAT_EQ(out[1], silu(2) * 3);
}

TEST(LmHeadArgmax, WritesLogitsAndTheirArgmax) {
  const std::vector<float> x = {1, 0, 0, 1};
  const std::vector<float> w = {1, 1, 3, 0, 0, 3, 2, 2};  // logits row 0: 1 3 0 2; row 1: 1 0 3 2
  std::vector<float> logits(8);
  std::vector<int32_t> next(2);
  lm_head_argmax(x.data(), w.data(), logits.data(), 2, 2, 4, next.data());
  EXPECT_EQ(logits, (std::vector<float>{1, 3, 0, 2, 1, 0, 3, 2}));
  EXPECT_EQ(next, (std::vector<int32_t>{1, 2}));
}

// The folded chain against the unfused one: rmsnorm then the products, residual += product.
TEST(FoldedNorm, ProductsMatchTheNormThenTheProduct) {
  const int n = 2, d = 8, out = 3, ffn = 2;
  std::vector<float> residual(n * d), gain(d), w(out * d), w_gate_up(2 * ffn * d), x(n * out);
  for (int i = 0; i < n * d; ++i) residual[i] = std::sin(0.7f * i) * 3;
  for (int j = 0; j < d; ++j) gain[j] = 0.5f + 0.1f * j;
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.3f * i);
  for (size_t i = 0; i < w_gate_up.size(); ++i) w_gate_up[i] = std::sin(0.2f * i);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * i;
  std::vector<float> scaled(n * d);
  std::vector<double> sum_sq(n);
  const FoldedNorm norm{scaled.data(), sum_sq.data(), gain.data(), 1e-5f};
  fold_rmsnorm(residual.data(), n, d, norm);
  for (int r = 0; r < n; ++r) {
    double want = 0;
    for (int j = 0; j < d; ++j) want += double(residual[r * d + j]) * residual[r * d + j];
    EXPECT_DOUBLE_EQ(sum_sq[r], want);
    for (int j = 0; j < d; ++j) EXPECT_EQ(scaled[r * d + j], residual[r * d + j] * gain[j]);
  }
  std::vector<float> normed(n * d), want(n * out), got(n * out);
  kernels::rmsnorm(residual.data(), gain.data(), n, d, 1e-5f, normed.data());
  kernels::matmul(normed.data(), n, d, w.data(), out, nullptr, want.data());
  matmul(norm, w.data(), got.data(), n, d, out);
  for (int i = 0; i < n * out; ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1 + std::abs(want[i])));

  std::vector<float> gate_up(n * 2 * ffn), want_act(n * ffn), got_act(n * ffn), unused(n * 2 * ffn);
  gate_up_swiglu(normed.data(), w_gate_up.data(), unused.data(), want_act.data(), n, d, ffn);
  gate_up_swiglu(norm, w_gate_up.data(), gate_up.data(), got_act.data(), n, d, ffn);
  for (int i = 0; i < n * ffn; ++i)
    EXPECT_NEAR(got_act[i], want_act[i], 1e-5f * (1 + std::abs(want_act[i])));

  // out = d here: residual [n, d] += x [n, out] · w_inᵀ with w_in [d, out].
  std::vector<float> w_in(d * out), want_residual = residual;
  for (size_t i = 0; i < w_in.size(); ++i) w_in[i] = 0.05f * (int(i % 7) - 3);
  std::vector<float> delta(n * d);
  kernels::matmul(x.data(), n, out, w_in.data(), d, nullptr, delta.data());
  for (int i = 0; i < n * d; ++i) want_residual[i] += delta[i];
  matmul_into_residual(x.data(), w_in.data(), residual.data(), n, out, d, norm);
  EXPECT_EQ(residual, want_residual);
  for (int j = 0; j < d; ++j) EXPECT_EQ(scaled[d + j], want_residual[d + j] * gain[j]);
}

}  // namespace
}  // namespace kvb::kernels
