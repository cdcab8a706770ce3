// TOPK oracle (docs/methods.md §14): the selection is the exact top-k of the logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "policies/decode_selectors.h"
#include "tests/policies/decode_test_util.h"

namespace kvb {
namespace {

// Brute force: sort every entry by its exact logit and take the first k.
std::vector<int32_t> brute_force_top_k(const std::vector<double>& scores, int k) {
  std::vector<int32_t> order = test::all_indices(static_cast<int>(scores.size()));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<double> exact_logits(const float* q, const KvStore& store, int layer, int h) {
  const int d = store.head_dim();
  std::vector<double> logits(store.length(layer, h));
  for (size_t j = 0; j < logits.size(); ++j) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += double{q[i]} * store.keys(layer, h)[j * d + i];
    logits[j] = dot;
  }
  return logits;
}

TEST(TopkSelector, PerHeadSelectionEqualsExactTopK) {
  const int layers = 3, kv_heads = 2, group = 2, d = 16, length = 200;
  KvStore store = test::random_store(layers, kv_heads, d, length, 1);
  auto selector = make_topk_selector({}, Budget::parse("10%"));
  selector->start(store, length, 20);
  for (int trial = 0; trial < 5; ++trial) {
    const std::vector<float> query = test::random_vector(kv_heads * group * d, 40 + trial);
    Selection selection = test::empty_selection(kv_heads * group);
    selector->select(1, query.data(), store, selection);
    EXPECT_TRUE(selection.dense) << "layers 0 and 1 are dense by default";
    selector->select(2, query.data(), store, selection);
    ASSERT_FALSE(selection.dense);
    for (int a = 0; a < kv_heads * group; ++a) {
      const std::vector<double> logits = exact_logits(query.data() + a * d, store, 2, a / group);
      std::vector<int32_t> got = selection.indices[a];
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, brute_force_top_k(logits, 20)) << "query head " << a;
    }
  }
}

// A fraction budget applies to the current length T, which grows with every decode token.
TEST(TopkSelector, FractionBudgetFollowsTheCurrentLength) {
  const int d = 8, length = 95;
  KvStore store = test::random_store(1, 1, d, length, 2);
  auto selector =
      make_topk_selector({{"dense_layers", nlohmann::json::array()}}, Budget::parse("10%"));
  selector->start(store, length, 9);
  const std::vector<float> query = test::random_vector(d, 3);
  Selection selection = test::empty_selection(1);
  selector->select(0, query.data(), store, selection);
  EXPECT_EQ(selection.indices[0].size(), 9u);  // int(0.1 * 95)
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> kv = test::random_vector(d, 10 + step);
    store.append(0, length + step, kv.data(), kv.data());
    selector->on_append(store, 0);
  }
  selector->select(0, query.data(), store, selection);
  EXPECT_EQ(selection.indices[0].size(), 10u);  // int(0.1 * 100)
}

// GQA "shared": one set per KV head ranked by the sum of the group's softmax weights.
TEST(TopkSelector, SharedModeRanksBySummedGroupWeights) {
  const int kv_heads = 1, group = 4, d = 16, length = 150, k = 12;
  KvStore store = test::random_store(1, kv_heads, d, length, 4);
  auto selector = make_topk_selector({{"dense_layers", nlohmann::json::array()}, {"gqa", "shared"}},
                                     Budget::parse(std::to_string(k)));
  selector->start(store, length, k);
  const std::vector<float> query = test::random_vector(group * d, 5);
  Selection selection = test::empty_selection(group);
  selector->select(0, query.data(), store, selection);
  std::vector<double> summed(length, 0.0);
  for (int a = 0; a < group; ++a) {
    std::vector<double> logits = exact_logits(query.data() + a * d, store, 0, 0);
    const double top = *std::max_element(logits.begin(), logits.end());
    double mass = 0;
    for (double& x : logits) mass += std::exp((x - top) / std::sqrt(double{d}));
    for (int j = 0; j < length; ++j)
      summed[j] += std::exp((logits[j] - top) / std::sqrt(double{d})) / mass;
  }
  for (int a = 0; a < group; ++a) {
    std::vector<int32_t> got = selection.indices[a];
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, brute_force_top_k(summed, k));
  }
  EXPECT_THROW(make_topk_selector({{"gqa", "union"}}, Budget::parse("5")), InputError);
}

}  // namespace
}  // namespace kvb
