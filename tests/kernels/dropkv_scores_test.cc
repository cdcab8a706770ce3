// dropkv_scores (DropKV's raw perturbation scores, docs/methods.md §9.2) against the definition
// evaluated in double: p from an explicit softmax row, ω = (p/(1−p+1e−6))², the squared distance
// between the row's output y and each value, averaged over the KV head's group.
// (Shapes keep every row over several keys: where p → 1, ω → 10¹² and float p decides the score.)
#include "kernels/cpu/dropkv_scores.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/kernels/random_vectors.h"
#include "tests/kernels/softmax_row.h"

namespace kvb::kernels {
namespace {

using test::random_vector;

struct Shape {
  int n_query_heads, n_kv_heads, head_dim, length, window;
};

class DropKvScoresVsDefinition : public ::testing::TestWithParam<Shape> {};

TEST_P(DropKvScoresVsDefinition, BothDistanceFormsMatchDoublePrecision) {
  const Shape s = GetParam();
  const int hq = s.n_query_heads, hkv = s.n_kv_heads, d = s.head_dim, L = s.length, W = s.window;
  const int group = hq / hkv;
  std::mt19937 rng(7);
  const auto queries = random_vector(rng, size_t(hq) * W * d, 1.5f);
  const auto outputs = random_vector(rng, size_t(hq) * W * d, 0.5f);
  const auto keys = random_vector(rng, size_t(hkv) * L * d, 1.0f);
  const auto values = random_vector(rng, size_t(hkv) * L * d, 1.0f);
  const double scale = 1.0 / std::sqrt(double(d));

  std::vector<float> lse(size_t(hq) * W);
  std::vector<double> expected(size_t(hkv) * L, 0.0), p;
  for (int a = 0; a < hq; ++a) {
    const int h = a / group;
    for (int t = 0; t < W; ++t) {
      const float* q = &queries[(size_t(a) * W + t) * d];
      const float* y = &outputs[(size_t(a) * W + t) * d];
      const int seen = L - W + t + 1;
      lse[a * W + t] = float(test::softmax_row(q, &keys[size_t(h) * L * d], seen, d, scale, p));
      for (int j = 0; j < seen; ++j) {
        const double omega = std::pow(p[j] / (1.0 - p[j] + 1e-6), 2);
        double distance = 0;
        for (int i = 0; i < d; ++i)
          distance += std::pow(double(y[i]) - values[(size_t(h) * L + j) * d + i], 2);
        expected[size_t(h) * L + j] += omega * distance / group;
      }
    }
  }
  for (const bool direct : {false, true}) {
    std::vector<float> scores(size_t(hkv) * L, -1.0f);
    DropKvScoreArgs args{hq,
                         hkv,
                         d,
                         L,
                         W,
                         queries.data(),
                         outputs.data(),
                         lse.data(),
                         keys.data(),
                         values.data(),
                         /*round_p_to_bf16=*/false,
                         scores.data(),
                         direct};
    dropkv_scores(args);
    for (size_t i = 0; i < scores.size(); ++i)
      ASSERT_NEAR(scores[i], expected[i], 1e-4 * (1.0 + expected[i]))
          << "direct_distance " << direct << " at " << i;
  }
}

// Rounding p to bf16 moves every score by at most bf16's relative step in each ω factor.
TEST(DropKvScores, RoundingPToBf16StaysWithinItsStep) {
  const int hq = 4, hkv = 2, d = 16, L = 40, W = 4;
  std::mt19937 rng(3);
  const auto queries = random_vector(rng, size_t(hq) * W * d, 0.3f);
  const auto outputs = random_vector(rng, size_t(hq) * W * d, 0.5f);
  const auto keys = random_vector(rng, size_t(hkv) * L * d, 1.0f);
  const auto values = random_vector(rng, size_t(hkv) * L * d, 1.0f);
  std::vector<float> lse(size_t(hq) * W), exact(size_t(hkv) * L), rounded(exact.size());
  std::vector<double> p;
  for (int a = 0; a < hq; ++a)
    for (int t = 0; t < W; ++t)
      lse[a * W + t] =
          float(test::softmax_row(&queries[(size_t(a) * W + t) * d], &keys[size_t(a / 2) * L * d],
                                  L - W + t + 1, d, 1.0 / std::sqrt(double(d)), p));
  DropKvScoreArgs args{
      hq,          hkv,           d,     L,           W, queries.data(), outputs.data(), lse.data(),
      keys.data(), values.data(), false, exact.data()};
  dropkv_scores(args);
  args.round_p_to_bf16 = true;
  args.scores = rounded.data();
  dropkv_scores(args);
  int differing = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_NEAR(rounded[i], exact[i], 2 * 2.0 * std::ldexp(1.0, -8) * exact[i] + 1e-12);
    differing += rounded[i] != exact[i];
  }
  EXPECT_GT(differing, 0);  // the rounding is applied
}

INSTANTIATE_TEST_SUITE_P(Shapes, DropKvScoresVsDefinition,
                         ::testing::Values(Shape{4, 4, 16, 24, 1}, Shape{6, 2, 32, 70, 8},
                                           Shape{14, 2, 64, 130, 8}, Shape{8, 1, 8, 17, 9}));

// pool_and_protect on a row worked by hand: max and mean pooling over 3 with PyTorch's edges (a
// mean divides by 3 at the edges too), then the last positions raised above the row's maximum.
TEST(PoolAndProtect, PoolsWithPyTorchEdgesAndRaisesTheProtectedTail) {
  const std::vector<float> raw = {1, 5, 2, 0, 3, /* head 1 */ 4, 4, 4, 4, 4};
  std::vector<float> pooled(raw.size());
  pool_and_protect(raw.data(), pooled.data(), 2, 5, 3, true, 2);
  EXPECT_EQ(pooled, (std::vector<float>{5, 5, 5, 6, 6, 4, 4, 4, 5, 5}));
  pool_and_protect(raw.data(), pooled.data(), 2, 5, 3, false, 1);
  const std::vector<float> mean = {6.f / 3, 8.f / 3, 7.f / 3, 5.f / 3, 8.f / 3 + 1,  // head 0
                                   8.f / 3, 4,       4,       4,       5};           // head 1
  for (size_t i = 0; i < mean.size(); ++i) EXPECT_FLOAT_EQ(pooled[i], mean[i]) << i;
  // Kernel 1 is the identity; a protected tail longer than the row covers all of it.
  std::vector<float> one_head(5);
  pool_and_protect(raw.data(), one_head.data(), 1, 5, 1, false, 9);
  EXPECT_EQ(one_head, (std::vector<float>{6, 6, 6, 6, 6}));
}

}  // namespace
}  // namespace kvb::kernels
