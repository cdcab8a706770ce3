// H2O (prefill and decode), TOVA, KNorm and KeyDiff on small hand-checkable cases.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/kv_store.h"
#include "policies/registry.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"
#include "synthetic_prefill.h"

namespace kvb {
namespace {

bool contains(const std::vector<int32_t>& kept, int32_t j) {
  return std::binary_search(kept.begin(), kept.end(), j);
}

TEST(H2o, PrefillKeepsHeavyHittersByColumnSumsPlusWindow) {
  test::SyntheticPrefill prefill(1, 4, 2, 30, 8, 1, 31);
  // column sums: heads 0,1 (KV head 0) favour 3 and 7; heads 2,3 (KV head 1) favour 12
  for (int a = 0; a < 4; ++a)
    for (int j = 0; j < 30; ++j) prefill.column_sums[0][a * 30 + j] = 0.1f;
  prefill.column_sums[0][0 * 30 + 3] = 5;
  prefill.column_sums[0][1 * 30 + 7] = 5;
  prefill.column_sums[0][2 * 30 + 12] = 5;
  prefill.column_sums[0][3 * 30 + 12] = 5;
  prefill.column_sums[0][3 * 30 + 13] = 1;
  const CachePlan plan = make_cache_plan("h2o", {{"window", 4}}, Budget::parse("6"));
  EXPECT_TRUE(plan.prefill->capture().attention_column_sums);
  const KeptIndices kept = plan.prefill->select(prefill.view, 6);
  EXPECT_EQ(kept[0][0], (std::vector<int32_t>{3, 7, 26, 27, 28, 29}));
  EXPECT_EQ(kept[0][1], (std::vector<int32_t>{12, 13, 26, 27, 28, 29}));
}

TEST(H2o, DecodeVariantEvictsTheLowestAccumulatedScoreOutsideTheRecentBlock) {
  test::SyntheticPrefill prefill(1, 2, 1, 8, 4, 1, 37);
  for (int a = 0; a < 2; ++a)
    for (int j = 0; j < 8; ++j)
      prefill.column_sums[0][a * 8 + j] = 1.0f + j % 3;                          // 1,2,3,1,2,3,1,2
  const CachePlan plan = make_cache_plan("h2o_decode", {}, Budget::parse("6"));  // hh 3, recent 3
  ASSERT_TRUE(plan.decode_eviction);
  const KeptIndices kept = plan.prefill->select(prefill.view, 6);
  // heavy among [0, 5): scores 1,2,3,1,2 → 2, 1, 4 (tie 1 vs 4 → lower index first)
  EXPECT_EQ(kept[0][0], (std::vector<int32_t>{1, 2, 4, 5, 6, 7}));
  KvStore store(1, 1, 4);
  for (int j = 0; j < 8; ++j)
    store.append(0, j, &prefill.keys[0][0][j * 4], &prefill.values[0][0][j * 4]);
  store.compact(0, kept[0], 2);
  plan.decode_eviction->start(store, 8, 6);
  // one decode step: the new token gets all the attention of query head 0, entry of position 5
  // gets 4 from query head 1 → accumulated (group sum): pos1 4, pos2 6, pos4 4, pos5 4+4 ...
  const std::vector<float> key(4, 0.0f);
  store.append(0, 8, key.data(), key.data());
  std::vector<float> head0(7, 0.0f), head1(7, 0.0f);
  head0[6] = 1.0f;
  head1[3] = 1.0f;  // position 5 (store index 3)
  DecodeStepView step;
  step.layer = 0;
  step.probabilities = {head0.data(), head1.data()};
  plan.decode_eviction->after_step(step, store);
  // candidates outside the last 3 (positions 6, 7, 8): 1 (score 4), 2 (6), 4 (4), 5 (4+1=5);
  // keep top 3 → 2, 5, then 1 (tie with 4, lower first) → position 4 evicted
  std::vector<int32_t> positions(store.positions(0, 0), store.positions(0, 0) + store.length(0, 0));
  EXPECT_EQ(positions, (std::vector<int32_t>{1, 2, 5, 6, 7, 8}));
}

TEST(Tova, KeepsTheSameTopTokensForEveryKvHeadAndEvictsEveryStep) {
  test::SyntheticPrefill prefill(1, 4, 2, 20, 8, 2, 41);
  const CachePlan plan = make_cache_plan("tova", {}, Budget::parse("8"));
  EXPECT_EQ(plan.prefill->capture().window_queries, 1);
  const KeptIndices kept = plan.prefill->select(prefill.view, 8);
  EXPECT_EQ(kept[0][0], kept[0][1]);
  EXPECT_EQ(kept[0][0].size(), 8u);
  ASSERT_TRUE(plan.decode_eviction);
  KvStore store(1, 2, 8);
  for (int j = 0; j < 20; ++j) {
    std::vector<float> k(16), v(16);
    store.append(0, j, k.data(), v.data());
  }
  store.compact(0, kept[0], 2);
  plan.decode_eviction->start(store, 20, 8);
  std::vector<float> zero(16, 0.0f);
  store.append(0, 20, zero.data(), zero.data());
  std::vector<float> probs(9, 0.1f);
  probs[2] = 0.0f;  // the least attended entry (mean over all query heads)
  const int32_t doomed = store.positions(0, 0)[2];
  DecodeStepView step;
  step.probabilities = {probs.data(), probs.data(), probs.data(), probs.data()};
  plan.decode_eviction->after_step(step, store);
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(store.length(0, h), 8);
    for (int j = 0; j < 8; ++j) EXPECT_NE(store.positions(0, h)[j], doomed);
  }
}

TEST(Knorm, KeepsTheSmallestKeyNorms) {
  test::SyntheticPrefill prefill(1, 2, 1, 10, 4, 1, 43);
  for (int j = 0; j < 10; ++j)
    for (int i = 0; i < 4; ++i) prefill.keys[0][0][j * 4 + i] = (j % 2 ? 1.0f : 0.1f) * (1 + j);
  const CachePlan plan = make_cache_plan("knorm", {}, Budget::parse("3"));
  EXPECT_EQ(plan.prefill->capture().window_queries, 0);
  EXPECT_EQ(plan.prefill->select(prefill.view, 3)[0][0], (std::vector<int32_t>{0, 2, 4}));
  // optional protected window (non-official extension)
  const CachePlan windowed = make_cache_plan("knorm", {{"window", 1}}, Budget::parse("3"));
  EXPECT_EQ(windowed.prefill->select(prefill.view, 3)[0][0], (std::vector<int32_t>{0, 2, 9}));
}

TEST(KeyDiff, KeepsDistinctKeysAndMatchesOneShotWithASingleBlock) {
  test::SyntheticPrefill prefill(1, 2, 1, 40, 4, 1, 47);
  // every key points along +x except positions 5 and 33, which point along +y
  for (int j = 0; j < 40; ++j) {
    float* k = &prefill.keys[0][0][j * 4];
    k[0] = (j == 5 || j == 33) ? 0.0f : 1.0f + 0.01f * j;
    k[1] = (j == 5 || j == 33) ? 1.0f : 0.02f * (j % 7);
    k[2] = k[3] = 0.0f;
  }
  for (int block : {8, 128}) {
    const CachePlan plan = make_cache_plan("keydiff", {{"block_size", block}}, Budget::parse("4"));
    const auto kept = plan.prefill->select(prefill.view, 4)[0][0];
    EXPECT_TRUE(contains(kept, 5)) << block;
    EXPECT_TRUE(contains(kept, 33)) << block;
  }
  // one block = one-shot top-k of −cos(k, mean unit key)
  const auto scorer = make_scorer("keydiff", {{"block_size", 1000}});
  const auto scores = scorer->score(prefill.view.layers[0])[0];
  std::vector<int32_t> expected = top_k(scores, 4);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(scorer->select(prefill.view, 4)[0][0], expected);
}

}  // namespace
}  // namespace kvb
