// AdaKV's head budgets (hand-computed and through the policy), KV bytes after compaction,
// CriticalKV's projected value norms and two-stage selection, AdaDropKV / CriticalAdaKV / AnDPro
// wiring.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "engine/kv_store.h"
#include "policies/methods.h"
#include "policies/registry.h"
#include "policies/scored_policy.h"
#include "synthetic_prefill.h"

namespace kvb {
namespace {

TEST(AdaKv, HeadBudgetsFollowTheOfficialRoundingAndKvpressIsExact) {
  const std::vector<std::vector<float>> scores = {{10, 9, 8, 7, 0, 0}, {1, 1, 1, 1, 1, 1}};
  // global top 2·3 = 6 → head 0 wins 4, head 1 wins 2
  AdaKvOptions official;
  official.alpha = 0.2;  // ⌊0.6⌋ = 0: round(3.2) = 3, round(1.6) = 2 → Σ = 5 (official drift)
  EXPECT_EQ(adakv_head_budgets(scores, 3, official), (std::vector<int>{3, 2}));
  official.alpha = 0.5;  // ⌊1.5⌋ = 1: round(2 + 1) = 3, round(1 + 1) = 2
  EXPECT_EQ(adakv_head_budgets(scores, 3, official), (std::vector<int>{3, 2}));
  official.alpha = 0.0;
  EXPECT_EQ(adakv_head_budgets(scores, 3, official), (std::vector<int>{4, 2}));
  AdaKvOptions kvpress;
  kvpress.kvpress_allocation = true;
  kvpress.alpha = 0.7;  // each head's top ⌊2.1⌋ = 2 forced, then the global top 6
  EXPECT_EQ(adakv_head_budgets(scores, 3, kvpress), (std::vector<int>{4, 2}));
  kvpress.alpha = 1.0;  // every head forced to its top 3
  EXPECT_EQ(adakv_head_budgets(scores, 3, kvpress), (std::vector<int>{3, 3}));
}

// Head 0's window attends to a few keys, head 1's attends evenly.
test::SyntheticPrefill peaked_and_flat() {
  test::SyntheticPrefill prefill(2, 4, 2, 160, 8, 32, 53);
  for (int l = 0; l < 2; ++l) {
    for (size_t i = 0; i < prefill.queries[l].size() / 2; ++i) prefill.queries[l][i] *= 3.0f;
    for (size_t i = prefill.queries[l].size() / 2; i < prefill.queries[l].size(); ++i)
      prefill.queries[l][i] *= 0.01f;
  }
  prefill.rebuild_view();
  return prefill;
}

TEST(AdaKv, PerHeadLengthsDifferAndSumToTheLayerBudget) {
  auto prefill = peaked_and_flat();
  const CachePlan plan = make_cache_plan("adakv", {{"allocation", "kvpress"}}, Budget::parse("48"));
  const KeptIndices kept = plan.prefill->select(prefill.view, 48);
  for (const auto& layer : kept) {
    EXPECT_NE(layer[0].size(), layer[1].size());
    EXPECT_EQ(layer[0].size() + layer[1].size(), 96u);
    for (const auto& head : layer)
      for (int j = 128; j < 160; ++j) EXPECT_TRUE(std::binary_search(head.begin(), head.end(), j));
  }
  // official allocation: lengths differ; the total is off by at most the rounding (≤ H/2 per head)
  const KeptIndices official =
      make_cache_plan("adakv", {}, Budget::parse("48")).prefill->select(prefill.view, 48);
  for (const auto& layer : official) {
    EXPECT_NE(layer[0].size(), layer[1].size());
    EXPECT_NEAR(double(layer[0].size() + layer[1].size()), 96.0, 1.0);
  }
}

int64_t bytes_after_compaction(const test::SyntheticPrefill& prefill, const KeptIndices& kept) {
  KvStore store(prefill.n_layers, prefill.n_kv_heads, prefill.head_dim);
  std::vector<float> k(prefill.n_kv_heads * prefill.head_dim), v(k.size());
  for (int l = 0; l < prefill.n_layers; ++l) {
    for (int j = 0; j < prefill.length; ++j) {
      for (int h = 0; h < prefill.n_kv_heads; ++h)
        for (int i = 0; i < prefill.head_dim; ++i) {
          k[h * prefill.head_dim + i] = prefill.keys[l][h][j * prefill.head_dim + i];
          v[h * prefill.head_dim + i] = prefill.values[l][h][j * prefill.head_dim + i];
        }
      store.append(l, j, k.data(), v.data());
    }
    store.compact(l, kept[l], 0);
  }
  int64_t entries = 0;
  for (const auto& layer : kept)
    for (const auto& head : layer) entries += static_cast<int64_t>(head.size());
  EXPECT_EQ(store.kv_bytes(), entries * 2 * prefill.head_dim * 4);  // f32 store
  EXPECT_EQ(store.allocated_bytes(), store.kv_bytes());             // no padding held
  return store.kv_bytes();
}

TEST(KvBytes, MatchKeptEntriesAndAdaKvEqualsSnapKvAtTheSameAverageBudget) {
  auto prefill = peaked_and_flat();
  const KeptIndices snap =
      make_cache_plan("snapkv", {}, Budget::parse("48")).prefill->select(prefill.view, 48);
  const KeptIndices ada = make_cache_plan("adakv", {{"allocation", "kvpress"}}, Budget::parse("48"))
                              .prefill->select(prefill.view, 48);
  const int64_t snap_bytes = bytes_after_compaction(prefill, snap);
  EXPECT_EQ(snap_bytes, int64_t(2) * 2 * 48 * 2 * 8 * 4);  // layers·heads·48 tokens·(k,v)·d·4
  EXPECT_EQ(bytes_after_compaction(prefill, ada), snap_bytes);
  const KeptIndices dropkv =
      make_cache_plan("adadropkv", {{"allocation", "kvpress"}}, Budget::parse("48"))
          .prefill->select(prefill.view, 48);
  EXPECT_EQ(bytes_after_compaction(prefill, dropkv), snap_bytes);
}

TEST(AdaKv, WrapsAnyScorerAndChecksItsParameters) {
  const CachePlan dropkv = make_cache_plan("adakv", {{"scorer", "dropkv"}}, Budget::parse("32"));
  EXPECT_EQ(dropkv.prefill->capture().window_queries, 8);  // DropKV's own default window
  const CachePlan adadropkv = make_cache_plan("adadropkv", {}, Budget::parse("32"));
  EXPECT_EQ(adadropkv.prefill->capture().window_queries, 8);
  EXPECT_EQ(make_cache_plan("adakv", {}, Budget::parse("32")).prefill->capture().window_queries,
            32);
  EXPECT_THROW(
      make_cache_plan("adakv", {{"scorer", "dropkv"}, {"aggregate", "sum"}}, Budget::parse("32")),
      InputError);  // a SnapKV parameter, unknown to DropKV
  EXPECT_THROW(make_cache_plan("adakv", {{"scorer", "nope"}}, Budget::parse("32")), InputError);
  EXPECT_THROW(make_cache_plan("adakv", {{"scorer", "full"}}, Budget::parse("32")), InputError);
}

TEST(CriticalKv, ProjectedValueNormsMatchBruteForce) {
  test::SyntheticPrefill prefill(1, 4, 2, 12, 4, 1, 59);
  const LayerPrefillView& layer = prefill.view.layers[0];
  const int d = 4, hidden = 16, inputs = 16;
  for (int h = 0; h < 2; ++h) {
    const auto nu = projected_value_norms(layer, h);
    for (int j = 0; j < 12; ++j) {
      double expected = 0;
      for (int a = 2 * h; a < 2 * h + 2; ++a)
        for (int o = 0; o < hidden; ++o) {
          double x = 0;
          for (int i = 0; i < d; ++i)
            x += double(layer.values[h][j * d + i]) *
                 layer.output_projection[o * inputs + a * d + i];
          expected += std::fabs(x) / 2;
        }
      EXPECT_NEAR(nu[j], expected, 1e-4) << h << "," << j;
    }
  }
}

TEST(CriticalKv, TwoStageSelection) {
  // forced = top 2 by score {0, 1}; the rest by (s + ε)·ν: index 3 (20), index 4 (10)
  EXPECT_EQ(critical_top({5, 4, 3, 2, 1, 0}, {0, 0, 0, 10, 10, 1}, 4, 2, 1e-4),
            (std::vector<int32_t>{0, 1, 3, 4}));
  test::SyntheticPrefill prefill(1, 4, 2, 64, 8, 32, 61);
  const CachePlan plan = make_cache_plan("criticalkv", {{"window", 8}}, Budget::parse("16"));
  EXPECT_TRUE(plan.prefill->capture().projected_value_norms);
  const KeptIndices kept = plan.prefill->select(prefill.view, 16);
  for (const auto& head : kept[0]) EXPECT_EQ(head.size(), 16u);
  const CachePlan ada = make_cache_plan("criticaladakv", {}, Budget::parse("40"));
  EXPECT_TRUE(ada.prefill->capture().projected_value_norms);
  const KeptIndices ada_kept = ada.prefill->select(prefill.view, 40);
  // official AdaKV rounding: Σ B_h = Σ round(c_h·0.8 + ⌊0.2·8⌋) ≈ 0.8·16 + 2 = 14.8 (+ window 2·32)
  EXPECT_NEAR(double(ada_kept[0][0].size() + ada_kept[0][1].size()), 64 + 14.8, 1.0);
}

TEST(AnDPro, IsLabelledAnApproximationAndUsesHeadBudgets) {
  const PolicyFactory& factory = find_policy("andpro");
  EXPECT_NE(factory.info.summary.find("APPROXIMATION"), std::string::npos);
  auto prefill = peaked_and_flat();
  const KeptIndices kept =
      make_cache_plan("andpro", {{"allocation", "kvpress"}}, Budget::parse("48"))
          .prefill->select(prefill.view, 48);
  for (const auto& layer : kept) EXPECT_EQ(layer[0].size() + layer[1].size(), 96u);
}

}  // namespace
}  // namespace kvb
