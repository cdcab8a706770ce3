// Shared selection machinery against hand-computed PyTorch results and brute force.
#include "policies/selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "common/errors.h"
#include "synthetic_prefill.h"

namespace kvb {
namespace {

TEST(Pooling, AvgPoolEdgesDivideByKernelLikeTorch) {
  // torch.nn.functional.avg_pool1d([[1,2,3,4,5]], 3, stride=1, padding=1) = [1, 2, 3, 4, 3]:
  // the edges sum two values and still divide by 3 (count_include_pad).
  const std::vector<float> scores = {1, 2, 3, 4, 5};
  const auto pooled = pool1d(scores, 3, Pooling::kAvg, Precision::kFp32);
  const std::vector<float> expected = {1.0f, 2.0f, 3.0f, 4.0f, 3.0f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(pooled[i], expected[i]) << i;
  // kernel 5: first = (1+2+3)/5, second = (1+2+3+4)/5, last = (3+4+5)/5
  const auto wide = pool1d(scores, 5, Pooling::kAvg, Precision::kFp32);
  EXPECT_FLOAT_EQ(wide[0], 6.0f / 5);
  EXPECT_FLOAT_EQ(wide[1], 10.0f / 5);
  EXPECT_FLOAT_EQ(wide[2], 15.0f / 5);
  EXPECT_FLOAT_EQ(wide[4], 12.0f / 5);
}

TEST(Pooling, MaxPoolPadsWithMinusInfinity) {
  const std::vector<float> scores = {-5, -1, -7, -2, -9};
  const auto pooled = pool1d(scores, 3, Pooling::kMax, Precision::kFp32);
  const std::vector<float> expected = {-1, -1, -1, -2, -2};  // zero padding would give 0 at edges
  EXPECT_EQ(pooled, expected);
}

// Against each window written out (torch's padding: a cut window, -inf for max, divided by the
// kernel for avg), bit for bit, for lengths below, at and past the kernel, with NaNs and ties.
TEST(Pooling, EveryOutputIsItsWindowBitForBit) {
  std::mt19937 rng(5);
  for (int n : {0, 1, 2, 6, 7, 8, 40, 1000})
    for (int kernel : {1, 3, 7, 31}) {
      std::vector<float> scores(n);
      for (float& v : scores) v = rng() % 13 == 0 ? std::nanf("") : float(int(rng() % 9) - 4) / 3;
      const int half = kernel / 2;
      for (const Pooling pooling : {Pooling::kMax, Pooling::kAvg})
        for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
          const auto got = pool1d(scores, kernel, pooling, precision);
          ASSERT_EQ(got.size(), scores.size());
          for (int i = 0; i < n; ++i) {
            float want = pooling == Pooling::kMax ? -std::numeric_limits<float>::infinity() : 0.f;
            for (int j = std::max(0, i - half); j <= std::min(n - 1, i + half); ++j)
              want = pooling == Pooling::kMax ? std::max(want, scores[j]) : want + scores[j];
            if (pooling == Pooling::kAvg) want = maybe_bf16(want / float(kernel), precision);
            if (kernel == 1) want = scores[i];  // no pooling: the scores as given
            EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
                << "n " << n << ", kernel " << kernel << ", position " << i;
          }
        }
    }
}

TEST(Pooling, EvenKernelIsAnError) {
  const std::vector<float> scores = {1, 2, 3};
  EXPECT_THROW(pool1d(scores, 4, Pooling::kAvg, Precision::kFp32), InputError);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  // 1 + 2^-8 is exactly half way between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)),
            1.0f + std::ldexp(1.0f, -7));
}

TEST(TopK, TiesGoToLowerIndexAndNanRanksLast) {
  const std::vector<float> scores = {1, 3, std::nanf(""), 3, 2, 3};
  EXPECT_EQ(top_k(scores, 3), (std::vector<int32_t>{1, 3, 5}));
  EXPECT_EQ(top_k(scores, 4), (std::vector<int32_t>{1, 3, 5, 4}));
  EXPECT_EQ(top_k(scores, 6).back(), 2);
}

// Against a full stable sort by the documented order, on scores with many ties and NaNs, for k
// from none to past the end.
TEST(TopK, EqualsAFullSortByScoreThenIndex) {
  std::mt19937 rng(11);
  for (int n : {1, 7, 100, 5000}) {
    std::vector<float> scores(n);
    for (float& s : scores) {
      const uint32_t r = rng();
      s = r % 17 == 0 ? std::nanf("") : float(int(r % 41) - 20) / 4;  // 41 values: ties
    }
    std::vector<int32_t> sorted(n);
    std::iota(sorted.begin(), sorted.end(), 0);
    auto key = [&](int32_t i) {
      return std::isnan(scores[i]) ? -std::numeric_limits<float>::infinity() : scores[i];
    };
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](int32_t a, int32_t b) { return key(a) > key(b); });
    for (int k : {0, 1, n / 3, n - 1, n, n + 5, -2}) {
      const int want = std::clamp(k, 0, n);
      std::vector<int32_t> best(sorted.begin(), sorted.begin() + want);
      EXPECT_EQ(top_k(scores, k), best) << "n " << n << ", k " << k;
      std::sort(best.begin(), best.end());
      EXPECT_EQ(top_k_set(scores, k), best) << "n " << n << ", k " << k;
    }
  }
}

TEST(ProtectedSpan, KeptIsSortedWhateverTheOrderOfTheChosen) {
  const ProtectedSpan span = protected_span(10, 1, 2);  // sinks {0}, candidates 1..7, window {8, 9}
  const std::vector<int32_t> want = {0, 1, 4, 6, 8, 9};
  EXPECT_EQ(span.kept(std::vector<int32_t>{3, 0, 5}), want);  // ranked
  EXPECT_EQ(span.kept(std::vector<int32_t>{0, 3, 5}), want);  // index order
}

TEST(KeepTop, ProtectsSinksAndWindowInsideTheBudget) {
  const std::vector<float> scores = {0, 9, 8, 1, 7, 0, 0};
  // keep 5: sink 0, window {5, 6}, then the two best of positions 1..4 -> {1, 2}
  EXPECT_EQ(keep_top(scores, 5, 1, 2), (std::vector<int32_t>{0, 1, 2, 5, 6}));
  // a budget below the protected count still keeps every protected token
  EXPECT_EQ(keep_top(scores, 1, 1, 2), (std::vector<int32_t>{0, 5, 6}));
  EXPECT_EQ(keep_top(scores, 7, 0, 0).size(), 7u);
}

TEST(WindowAttention, RowsAreCausalSoftmaxesOverAllVisibleKeys) {
  test::SyntheticPrefill prefill(1, 2, 1, 10, 4, 3, 7);
  const LayerPrefillView& layer = prefill.view.layers[0];
  const auto probs = window_attention(layer, 1, 3, Precision::kFp32);
  for (int t = 0; t < 3; ++t) {
    const int visible = 10 - 3 + t + 1;
    // brute force in double
    std::vector<double> logits(visible);
    double max_logit = -1e300, total = 0;
    for (int j = 0; j < visible; ++j) {
      double dot = 0;
      for (int i = 0; i < 4; ++i) dot += double(layer.query(1, t)[i]) * layer.keys[0][j * 4 + i];
      logits[j] = dot / 2.0;
      max_logit = std::max(max_logit, logits[j]);
    }
    for (auto& x : logits) total += std::exp(x - max_logit);
    for (int j = 0; j < 10; ++j) {
      const double expected = j < visible ? std::exp(logits[j] - max_logit) / total : 0.0;
      EXPECT_NEAR(probs[t * 10 + j], expected, 1e-6) << t << "," << j;
    }
  }
  // bf16 mode: every probability is a bf16 value
  const auto rounded = window_attention(layer, 1, 3, Precision::kBf16);
  for (float p : rounded) EXPECT_EQ(p, round_to_bf16(p));
}

TEST(Budget, RejectsNonPositiveAndLargerThanPrompt) {
  EXPECT_THROW(check_budget("snapkv", 0, 100), InputError);
  EXPECT_THROW(check_budget("snapkv", -3, 100), InputError);
  EXPECT_THROW(check_budget("snapkv", 101, 100), InputError);
  EXPECT_NO_THROW(check_budget("snapkv", 100, 100));
  try {
    check_budget("snapkv", 101, 100);
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("larger than the prompt"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvb
