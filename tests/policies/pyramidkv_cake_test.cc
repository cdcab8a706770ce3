// PyramidKV's and CAKE's layer budgets on hand-computed cases, and their selections.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/kv_store.h"
#include "policies/methods.h"
#include "policies/registry.h"
#include "policies/scored_policy.h"
#include "synthetic_prefill.h"

namespace kvb {
namespace {

TEST(PyramidKv, OfficialIntegerSchedule) {
  // N = 4, C = 48, w = 8, β = 20, L = 1000: b = 40, min = 2, max = 78, steps = ⌊76/3⌋ = 25
  EXPECT_EQ(pyramid_layer_budgets(48, 8, 20, 4, 1000), (std::vector<int>{86, 61, 36, 11}));
  // max ≥ L − w: L = 85 → max = 77, min = 80 − 77 = 3, steps = ⌊74/3⌋ = 24
  EXPECT_EQ(pyramid_layer_budgets(48, 8, 20, 4, 85), (std::vector<int>{85, 61, 37, 13}));
  // L < 2b: uniform SnapKV
  EXPECT_EQ(pyramid_layer_budgets(48, 8, 20, 4, 79), (std::vector<int>{48, 48, 48, 48}));
}

TEST(PyramidKv, SelectionKeepsTheScheduledCountPerLayer) {
  test::SyntheticPrefill prefill(4, 4, 2, 200, 8, 8, 21);
  const CachePlan plan = make_cache_plan("pyramidkv", {}, Budget::parse("48"));
  const KeptIndices kept = plan.prefill->select(prefill.view, 48);
  const auto budgets = pyramid_layer_budgets(48, 8, 20, 4, 200);
  EXPECT_GT(budgets[0], budgets[3]);
  for (int l = 0; l < 4; ++l)
    for (const auto& head : kept[l]) EXPECT_EQ(static_cast<int>(head.size()), budgets[l]) << l;
}

TEST(Cake, BudgetAdjustmentCapsSharesAndRestoresTheTotal) {
  // S = 20, w = 4, N = 3: T = 48. Preferences 8:1:1 → int(38.4, 4.8, 4.8) = 38, 4, 4.
  // L = 30 caps at 26: excess 12 shared by layers 1, 2 → 10, 10 (sum 46); +2 → layers below the
  // cap: 1 each to layers 1, 2 → 11, 11; totals 26 + 11 + 11 = 48.
  EXPECT_EQ(cake_layer_budgets({8, 1, 1}, 20, 4, 30), (std::vector<int>{26, 11, 11}));
  // equal preferences: uniform S − w
  EXPECT_EQ(cake_layer_budgets({1, 1, 1}, 20, 4, 1000), (std::vector<int>{16, 16, 16}));
  // truncation shortfall goes to the earliest eligible layer: T = 21, 1:1:2 → int(5.25, 5.25,
  // 10.5) = 5, 5, 10 (sum 20) → +1 to layer 0
  EXPECT_EQ(cake_layer_budgets({1, 1, 2}, 10, 3, 1000), (std::vector<int>{6, 5, 10}));
}

TEST(Cake, DispersedLayersGetMoreBudgetAndDecodeEvictionHoldsIt) {
  test::SyntheticPrefill prefill(2, 2, 1, 120, 8, 8, 23);
  // layer 0: near-uniform attention (small logits) → high entropy; layer 1: peaked (large logits)
  for (auto& q : prefill.queries[0]) q *= 0.05f;
  for (auto& q : prefill.queries[1]) q *= 4.0f;
  prefill.rebuild_view();
  const CachePlan plan =
      make_cache_plan("cake", {{"window", 8}, {"tau2", 1e9}}, Budget::parse("24"));
  ASSERT_TRUE(plan.decode_eviction);
  const KeptIndices kept = plan.prefill->select(prefill.view, 24);
  EXPECT_GT(kept[0][0].size(), kept[1][0].size());
  EXPECT_EQ(kept[0][0].size() + kept[1][0].size(), 48u);

  // decode: after compaction, every appended token triggers one eviction back to B_ℓ + w
  KvStore store(2, 1, 8);
  for (int l = 0; l < 2; ++l) {
    for (int j = 0; j < 120; ++j)
      store.append(l, j, &prefill.keys[l][0][j * 8], &prefill.values[l][0][j * 8]);
    store.compact(l, kept[l], 4);
  }
  plan.decode_eviction->start(store, 120, 24);
  const std::vector<float> key(8, 0.5f);
  for (int step = 0; step < 3; ++step) {
    for (int l = 0; l < 2; ++l) {
      const int before = store.length(l, 0);
      store.append(l, 120 + step, key.data(), key.data());
      const int n = store.length(l, 0);
      std::vector<float> probs(n, 1.0f / n);
      probs[n - 9] = 0.0f;  // a non-window entry with no attention: the one to evict
      DecodeStepView view;
      view.layer = l;
      view.step = step;
      view.probabilities = {probs.data(), probs.data()};
      const int32_t doomed = store.positions(l, 0)[n - 9];
      plan.decode_eviction->after_step(view, store);
      EXPECT_EQ(store.length(l, 0), before) << l;
      for (int j = 0; j < store.length(l, 0); ++j) EXPECT_NE(store.positions(l, 0)[j], doomed);
    }
  }
}

TEST(Cake, NoPrefillCompressionUnlessPromptExceedsBudgetPlusWindow) {
  test::SyntheticPrefill prefill(2, 2, 1, 40, 8, 8, 29);
  const CachePlan plan = make_cache_plan("cake", {{"window", 8}}, Budget::parse("32"));
  const KeptIndices kept = plan.prefill->select(prefill.view, 32);  // L = 40 ≤ S + w = 40
  EXPECT_EQ(kept[0][0].size(), 40u);
  const CachePlan off = make_cache_plan("cake", {{"decode_eviction", false}}, Budget::parse("32"));
  EXPECT_FALSE(off.decode_eviction);
}

}  // namespace
}  // namespace kvb
