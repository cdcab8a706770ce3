// window_attention_sums (kernels/cpu/window_attention_sums.h) against a brute force in double that
// rounds where the contract says: GQA groups, both query layouts, padded strides, odd lengths, a
// window longer than the prompt, one key.
#include "kernels/cpu/window_attention_sums.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/dequantize.h"

namespace kvb::kernels {
namespace {

float to_bf16_and_back(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct Shape {
  int n_query_heads, n_kv_heads, head_dim, length, window;
  bool rows_outermost;  // queries [w, Hq*d] as the device holds them, else [Hq, w, d]
};

struct Inputs {
  std::vector<float> queries, keys;
  int64_t query_row_stride, query_head_stride, kv_head_stride, sums_head_stride;
};

// Multiples of 1/8 in [-2, 2] (exact bf16 values) when `exact_products`: every q·k of up to 256
// terms is then exact in fp32 whatever the order, so the rounded logits are the contract's own;
// else normal values, whose fp32 q·k the brute force in double only approximates.
Inputs make_inputs(const Shape& s, bool exact_products, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> eighths(-16, 16);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto value = [&] { return exact_products ? eighths(rng) / 8.0f : normal(rng); };
  Inputs in;
  const int d = s.head_dim;
  in.query_row_stride = s.rows_outermost ? int64_t(s.n_query_heads) * d + 6 : d;
  in.query_head_stride = s.rows_outermost ? d : int64_t(s.window) * d;
  in.queries.resize(size_t(s.rows_outermost ? s.window * in.query_row_stride
                                            : s.n_query_heads * in.query_head_stride));
  for (auto& x : in.queries) x = value();
  in.kv_head_stride = int64_t(s.length + 3) * d;  // spare rows after each head
  in.keys.resize(size_t(s.n_kv_heads * in.kv_head_stride));
  for (auto& x : in.keys) x = value();
  in.sums_head_stride = s.length + 2;
  return in;
}

std::vector<float> run_kernel(const Shape& s, const Inputs& in, bool casts) {
  std::vector<float> sums(size_t(s.n_query_heads) * in.sums_head_stride, -7.0f);
  window_attention_sums({.queries = in.queries.data(),
                         .query_row_stride = in.query_row_stride,
                         .query_head_stride = in.query_head_stride,
                         .keys = in.keys.data(),
                         .kv_head_stride = in.kv_head_stride,
                         .sums = sums.data(),
                         .sums_head_stride = in.sums_head_stride,
                         .length = s.length,
                         .window = s.window,
                         .n_query_heads = s.n_query_heads,
                         .n_kv_heads = s.n_kv_heads,
                         .head_dim = s.head_dim,
                         .reference_bf16_casts = casts});
  return sums;
}

// [Hq, L] in double: logits from a double q·k (rounded to fp32, then to bf16, divided by sqrt(d)
// in fp32 and rounded again with the casts), softmax in double, p rounded to bf16 with the casts.
std::vector<double> brute_force(const Shape& s, const Inputs& in, bool casts) {
  const int L = s.length, d = s.head_dim, w = std::min(s.window, L);
  const int group = s.n_query_heads / s.n_kv_heads;
  const float root = std::sqrt(float(d));
  std::vector<double> sums(size_t(s.n_query_heads) * L, 0.0);
  for (int a = 0; a < s.n_query_heads; ++a)
    for (int t = 0; t < w; ++t) {
      const float* q =
          &in.queries[(s.window - w + t) * in.query_row_stride + a * in.query_head_stride];
      const int visible = L - w + t + 1;
      std::vector<double> x(visible);
      for (int j = 0; j < visible; ++j) {
        const float* k = &in.keys[(a / group) * in.kv_head_stride + int64_t(j) * d];
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(q[i]) * k[i];
        x[j] = casts ? to_bf16_and_back(to_bf16_and_back(float(dot)) / root) : dot / root;
      }
      const double top = *std::max_element(x.begin(), x.end());
      double total = 0;
      for (double v : x) total += std::exp(v - top);
      for (int j = 0; j < visible; ++j) {
        const double p = std::exp(x[j] - top) / total;
        sums[size_t(a) * L + j] += casts ? to_bf16_and_back(float(p)) : p;
      }
    }
  return sums;
}

// With the casts a p within an fp32 rounding of a bf16 boundary may round either way: one bf16
// step, at most 2^-7 of the term, so of the sum. Without, fp32 against double.
void expect_sums(const Shape& s, const Inputs& in, bool casts, double relative) {
  const std::vector<float> got = run_kernel(s, in, casts);
  const std::vector<double> want = brute_force(s, in, casts);
  for (int a = 0; a < s.n_query_heads; ++a) {
    for (int j = 0; j < s.length; ++j) {
      const double expected = want[size_t(a) * s.length + j];
      ASSERT_NEAR(got[a * in.sums_head_stride + j], expected, relative * expected + 1e-6)
          << "head " << a << " key " << j << (casts ? " with casts" : " in fp32");
    }
    for (int64_t j = s.length; j < in.sums_head_stride; ++j)  // padding left alone
      ASSERT_EQ(got[a * in.sums_head_stride + j], -7.0f);
  }
}

const Shape kShapes[] = {
    {4, 4, 16, 37, 8, true},    // no GQA, rows outermost with padding
    {6, 2, 32, 50, 16, false},  // groups of 3, [Hq, w, d]
    {7, 1, 64, 129, 32, true},  // one KV head for 7 query heads, odd length
    {4, 2, 8, 5, 9, false},     // a window longer than the prompt: its last 5 rows count
    {2, 2, 64, 1, 1, true},     // one key
    {8, 2, 128, 70, 32, true},
};

TEST(WindowAttentionSums, WithCastsMatchesTheRoundedBruteForce) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "hq " << s.n_query_heads << " hkv " << s.n_kv_heads << " d " << s.head_dim
                 << " L " << s.length << " w " << s.window);
    expect_sums(s, make_inputs(s, true, seed++), true, 1.0 / 128);
  }
}

TEST(WindowAttentionSums, InFp32MatchesDoublePrecision) {
  uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "hq " << s.n_query_heads << " hkv " << s.n_kv_heads << " d " << s.head_dim
                 << " L " << s.length << " w " << s.window);
    expect_sums(s, make_inputs(s, false, seed++), false, 1e-4);
  }
}

// The casts change the statistic measurably (the point of computing it with them).
TEST(WindowAttentionSums, TheCastsMoveTheSums) {
  const Shape s{4, 2, 64, 300, 32, true};
  const Inputs in = make_inputs(s, false, 9);
  const std::vector<float> with = run_kernel(s, in, true), without = run_kernel(s, in, false);
  double worst = 0;
  for (int a = 0; a < s.n_query_heads; ++a)
    for (int j = 0; j < s.length; ++j) {
      const double x = with[a * in.sums_head_stride + j], y = without[a * in.sums_head_stride + j];
      worst = std::max(worst, std::abs(x - y) / std::max(y, 1e-30));
    }
  EXPECT_GT(worst, 1e-3);
}

TEST(WindowAttentionSums, RejectsHeadsThatAreNoGqaGroups) {
  const Shape s{6, 4, 16, 10, 4, true};
  const Inputs in = make_inputs(s, true, 3);
  EXPECT_THROW(run_kernel(s, in, true), std::invalid_argument);
}

}  // namespace
}  // namespace kvb::kernels
