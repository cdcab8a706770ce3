// DropKV: the perturbation identity against brute force in double precision, and the scorer's
// defining behaviours (score = (p/(1-p))^2 ||a - v||^2, pooling over the full length, window in the
// budget, both precision modes).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "policies/registry.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"
#include "synthetic_prefill.h"

namespace kvb {
namespace {

using Vector = std::vector<double>;

struct Attention {
  Vector p;               // softmax weights
  std::vector<Vector> v;  // values
  Vector output;          // a = Σ p_j v_j
};

// Softmax attention of one query over the tokens in `subset`, in double.
Vector attend(const Vector& q, const std::vector<Vector>& k, const std::vector<Vector>& v,
              const std::vector<int>& subset, Vector* weights = nullptr) {
  const size_t d = q.size();
  std::vector<double> logits;
  double max_logit = -1e300;
  for (int j : subset) {
    double dot = 0;
    for (size_t i = 0; i < d; ++i) dot += q[i] * k[j][i];
    logits.push_back(dot / std::sqrt(double(d)));
    max_logit = std::max(max_logit, logits.back());
  }
  double total = 0;
  for (double x : logits) total += std::exp(x - max_logit);
  Vector out(d, 0.0);
  if (weights) weights->assign(k.size(), 0.0);
  for (size_t s = 0; s < subset.size(); ++s) {
    const double p = std::exp(logits[s] - max_logit) / total;
    if (weights) (*weights)[subset[s]] = p;
    for (size_t i = 0; i < d; ++i) out[i] += p * v[subset[s]][i];
  }
  return out;
}

double squared_distance(const Vector& a, const Vector& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return sum;
}

TEST(DropKvIdentity, KeptOutputAndPerturbationMatchBruteForceInDouble) {
  std::mt19937 rng(42);
  std::normal_distribution<double> normal(0, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 24, d = 16;
    Vector q(d);
    std::vector<Vector> k(n, Vector(d)), v(n, Vector(d));
    for (auto& x : q) x = normal(rng) * 2;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < d; ++i) k[j][i] = normal(rng), v[j][i] = normal(rng);
    std::vector<int> all(n), kept, evicted;
    for (int j = 0; j < n; ++j) all[j] = j;
    for (int j = 0; j < n; ++j)
      (std::bernoulli_distribution(0.3)(rng) ? evicted : kept).push_back(j);
    if (evicted.empty() || kept.empty()) continue;
    Vector p;
    const Vector a = attend(q, k, v, all, &p);
    const Vector brute = attend(q, k, v, kept);  // softmax over the complement
    double mass = 0;
    Vector numerator = a, perturbation(d, 0.0);
    for (int j : evicted) {
      mass += p[j];
      for (int i = 0; i < d; ++i) {
        numerator[i] -= p[j] * v[j][i];
        perturbation[i] += p[j] * (a[i] - v[j][i]);
      }
    }
    for (int i = 0; i < d; ++i) EXPECT_NEAR(brute[i], numerator[i] / (1 - mass), 1e-12);
    double delta = 0;
    for (double x : perturbation) delta += x * x;
    delta /= (1 - mass) * (1 - mass);
    EXPECT_NEAR(squared_distance(brute, a), delta, 1e-12 * std::max(1.0, delta));
    // single token: Δ({j}) = (p/(1-p))^2 ||a - v_j||^2
    const int j = evicted[0];
    std::vector<int> without_j;
    for (int i = 0; i < n; ++i)
      if (i != j) without_j.push_back(i);
    const double single = std::pow(p[j] / (1 - p[j]), 2) * squared_distance(a, v[j]);
    EXPECT_NEAR(squared_distance(attend(q, k, v, without_j), a), single,
                1e-12 * std::max(1.0, single));
  }
}

// One query head, one KV head, one window row (the last prompt token): the scorer's raw score of
// every key equals the brute-force perturbation of evicting that key alone.
TEST(DropKvScore, Fp32ScoreIsTheSingleTokenPerturbation) {
  test::SyntheticPrefill prefill(1, 1, 1, 30, 8, 1, 11);
  const auto scorer = make_scorer("dropkv", {{"window", 1}, {"kernel", 1}, {"precision", "fp32"}});
  const LayerPrefillView& layer = prefill.view.layers[0];
  const auto scores = scorer->score(layer)[0];
  const int n = 30, d = 8;
  Vector q(d);
  std::vector<Vector> k(n, Vector(d)), v(n, Vector(d));
  for (int i = 0; i < d; ++i) q[i] = layer.query(0, 0)[i];
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < d; ++i)
      k[j][i] = layer.keys[0][j * d + i], v[j][i] = layer.values[0][j * d + i];
  std::vector<int> all(n);
  for (int j = 0; j < n; ++j) all[j] = j;
  const Vector a = attend(q, k, v, all);
  for (int j = 0; j < n; ++j) {
    std::vector<int> rest;
    for (int i = 0; i < n; ++i)
      if (i != j) rest.push_back(i);
    const double exact = squared_distance(attend(q, k, v, rest), a);
    EXPECT_NEAR(scores[j], exact, 1e-4 * exact + 1e-9) << j;
  }
}

TEST(DropKvScore, TokenWithProbabilityNearOneGetsAHugeFiniteScore) {
  test::SyntheticPrefill prefill(1, 1, 1, 16, 8, 1, 5, 0.1f);
  // key 3 takes p ≈ 0.997 of the last query's attention: ω = (p/(1-p))^2 is ~1e5 while ||a - v||
  // is small; the 1e-6 guard must keep the score finite even where bf16 rounds p to 1.
  for (int i = 0; i < 8; ++i) prefill.keys[0][0][3 * 8 + i] = 1.0f;
  for (auto& x : prefill.queries[0]) x = 3.0f;
  for (const char* precision : {"fp32", "bf16"}) {
    const auto scores =
        make_scorer("dropkv", {{"window", 1}, {"kernel", 1}, {"precision", precision}})
            ->score(prefill.view.layers[0])[0];
    EXPECT_TRUE(std::isfinite(scores[3])) << precision;
    for (int j = 0; j < 15; ++j) {
      if (j == 3) continue;
      EXPECT_GT(scores[3], 1e3 * scores[j]) << precision << " " << j;
    }
  }
}

TEST(DropKvScore, PoolsOverTheFullLengthSoWindowScoresSpillIntoThePrefix) {
  test::SyntheticPrefill prefill(1, 2, 1, 40, 8, 8, 9);
  const LayerPrefillView& layer = prefill.view.layers[0];
  const auto raw = make_scorer("dropkv", {{"kernel", 1}, {"precision", "fp32"}})->score(layer)[0];
  const auto pooled = make_scorer("dropkv", {{"precision", "fp32"}})->score(layer)[0];
  const auto expected = pool1d(raw, 11, Pooling::kMax, Precision::kFp32);  // over all 40 positions
  for (int j = 0; j < 40; ++j) EXPECT_FLOAT_EQ(pooled[j], expected[j]) << j;
  const auto avg =
      make_scorer("dropkv", {{"precision", "fp32"}, {"pooling", "avg"}})->score(layer)[0];
  const auto expected_avg = pool1d(raw, 11, Pooling::kAvg, Precision::kFp32);
  for (int j = 0; j < 40; ++j) EXPECT_FLOAT_EQ(avg[j], expected_avg[j]) << j;
}

TEST(DropKvSelect, WindowCountsInsideTheBudgetAndBudgetIsAtLeastTheWindow) {
  test::SyntheticPrefill prefill(2, 4, 2, 64, 8, 8, 13);
  const CachePlan plan = make_cache_plan("dropkv", {}, Budget::parse("20"));
  EXPECT_EQ(plan.prefill->capture().window_queries, 8);
  const KeptIndices kept = plan.prefill->select(prefill.view, 20);
  for (const auto& layer : kept) {
    for (const auto& head : layer) {
      EXPECT_EQ(head.size(), 20u);
      for (int j = 56; j < 64; ++j) EXPECT_TRUE(std::binary_search(head.begin(), head.end(), j));
    }
  }
  const KeptIndices small = plan.prefill->select(prefill.view, 3);  // max(budget, w) = 8
  EXPECT_EQ(small[0][0], (std::vector<int32_t>{56, 57, 58, 59, 60, 61, 62, 63}));
}

TEST(DropKvSelect, Bf16AndFp32ModesAgreeOnMostOfTheKeptSet) {
  test::SyntheticPrefill prefill(1, 4, 2, 200, 16, 8, 17);
  const auto bf16 = make_scorer("dropkv", {})->select(prefill.view, 60);
  const auto fp32 = make_scorer("dropkv", {{"precision", "fp32"}})->select(prefill.view, 60);
  const auto bf16_scores = make_scorer("dropkv", {})->score(prefill.view.layers[0]);
  const auto fp32_scores =
      make_scorer("dropkv", {{"precision", "fp32"}})->score(prefill.view.layers[0]);
  EXPECT_NE(bf16_scores, fp32_scores);  // the casts are emulated, not ignored
  for (int h = 0; h < 2; ++h) {
    std::vector<int32_t> common;
    std::set_intersection(bf16[0][h].begin(), bf16[0][h].end(), fp32[0][h].begin(),
                          fp32[0][h].end(), std::back_inserter(common));
    EXPECT_GE(common.size(), 54u);
  }
}

}  // namespace
}  // namespace kvb
