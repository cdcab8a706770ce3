// StreamingLLM and SnapKV on small hand-checkable cases.
#include <gtest/gtest.h>

#include <cmath>

#include "policies/registry.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"
#include "synthetic_prefill.h"

namespace kvb {
namespace {

TEST(StreamingLlm, KeepsSinksPlusMostRecent) {
  test::SyntheticPrefill prefill(2, 4, 2, 20, 8, 1, 1);
  const CachePlan plan = make_cache_plan("streamingllm", {}, Budget::parse("10"));
  const KeptIndices kept = plan.prefill->select(prefill.view, 10);
  const std::vector<int32_t> expected = {0, 1, 2, 3, 14, 15, 16, 17, 18, 19};
  for (const auto& layer : kept)
    for (const auto& head : layer) EXPECT_EQ(head, expected);
  EXPECT_EQ(plan.prefill->capture().window_queries, 0);  // position-only, kind B
  EXPECT_EQ(plan.prefill->kind(), PolicyKind::kPrefillQueryAgnostic);
}

TEST(StreamingLlm, DenseLayersAndSinkParameter) {
  test::SyntheticPrefill prefill(2, 4, 2, 20, 8, 1, 1);
  const CachePlan plan =
      make_cache_plan("streamingllm", {{"sinks", 2}, {"dense_layers", {1}}}, Budget::parse("5"));
  const KeptIndices kept = plan.prefill->select(prefill.view, 5);
  EXPECT_EQ(kept[0][0], (std::vector<int32_t>{0, 1, 17, 18, 19}));
  EXPECT_EQ(kept[1][1].size(), 20u);
}

// Brute force of the SnapKV score in double: window softmax, sum over rows, zero-padded avg pool
// dividing by k, group mean.
std::vector<double> brute_force_snapkv(const LayerPrefillView& layer, int kv_head, int w, int k) {
  const int L = layer.length, d = layer.head_dim, g = layer.group_size(), prefix = L - w;
  std::vector<double> group(prefix, 0.0);
  for (int a = kv_head * g; a < (kv_head + 1) * g; ++a) {
    std::vector<double> sums(prefix, 0.0);
    for (int t = 0; t < w; ++t) {
      const float* q = layer.query(a, layer.window - w + t);
      const int visible = L - w + t + 1;
      std::vector<double> logits(visible);
      double max_logit = -1e300, total = 0;
      for (int j = 0; j < visible; ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(q[i]) * layer.keys[kv_head][j * d + i];
        logits[j] = dot / std::sqrt(double(d));
        max_logit = std::max(max_logit, logits[j]);
      }
      for (double x : logits) total += std::exp(x - max_logit);
      for (int j = 0; j < prefix; ++j) sums[j] += std::exp(logits[j] - max_logit) / total;
    }
    for (int j = 0; j < prefix; ++j) {
      double pooled = 0;
      for (int i = j - k / 2; i <= j + k / 2; ++i)
        if (i >= 0 && i < prefix) pooled += sums[i];
      group[j] += pooled / k / g;
    }
  }
  return group;
}

TEST(SnapKv, Fp32ScoresMatchBruteForceWithTorchPoolingEdges) {
  test::SyntheticPrefill prefill(1, 4, 2, 40, 8, 6, 3);
  const auto scorer = make_scorer("snapkv", {{"window", 4}, {"kernel", 5}, {"precision", "fp32"}});
  const auto scores = scorer->score(prefill.view.layers[0]);
  for (int h = 0; h < 2; ++h) {
    const auto expected = brute_force_snapkv(prefill.view.layers[0], h, 4, 5);
    for (int j = 0; j < 36; ++j) EXPECT_NEAR(scores[h][j], expected[j], 1e-5) << h << "," << j;
  }
  // the kept set is the top 6 prefix positions of the brute-force score plus the 4 window tokens
  const KeptIndices kept = scorer->select(prefill.view, 10);
  for (int h = 0; h < 2; ++h) {
    auto expected = brute_force_snapkv(prefill.view.layers[0], h, 4, 5);
    std::vector<float> as_float(expected.begin(), expected.end());
    std::vector<int32_t> want = top_k(as_float, 6);
    for (int j = 36; j < 40; ++j) want.push_back(j);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(kept[0][h], want);
  }
}

TEST(SnapKv, KeepsTheKeyTheWindowAttendsTo) {
  test::SyntheticPrefill prefill(1, 2, 1, 30, 8, 4, 5, 0.1f);
  // make every window query point at key 11 (and only there)
  for (int i = 0; i < 8; ++i) prefill.keys[0][0][11 * 8 + i] = 3.0f;
  for (auto& q : prefill.queries[0]) q = 3.0f;
  const CachePlan plan =
      make_cache_plan("snapkv", {{"window", 4}, {"kernel", 1}}, Budget::parse("5"));
  const KeptIndices kept = plan.prefill->select(prefill.view, 5);
  EXPECT_EQ(kept[0][0], (std::vector<int32_t>{11, 26, 27, 28, 29}));
}

}  // namespace
}  // namespace kvb

namespace kvb {
namespace {

TEST(SnapKv, BudgetIncludesWindowByDefaultAndCanExcludeIt) {
  test::SyntheticPrefill prefill(1, 2, 1, 40, 8, 4, 3);
  const auto inside = make_scorer("snapkv", {{"window", 4}})->select(prefill.view, 10);
  EXPECT_EQ(inside[0][0].size(), 10u);
  const auto outside = make_scorer("snapkv", {{"window", 4}, {"budget_includes_window", false}})
                           ->select(prefill.view, 10);
  EXPECT_EQ(outside[0][0].size(), 14u);
}

}  // namespace
}  // namespace kvb
