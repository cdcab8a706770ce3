// topk_select (kernels/cpu/topk_select.h) against a stable sort: the k largest, ties to the lower
// index, returned ascending; both zeros tie; k clamped to [0, n]; 16-bit keys likewise.
#include "kernels/cpu/topk_select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace kvb::kernels {
namespace {

template <typename Key>
std::vector<int32_t> sorted_top_k(const std::vector<Key>& keys, int k) {
  std::vector<int32_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return keys[a] > keys[b]; });
  order.resize(std::clamp(k, 0, static_cast<int>(keys.size())));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(TopkSelect, MatchesAStableSortWithLowerIndexTieBreak) {
  std::mt19937 rng(5);
  for (const int n : {1, 7, 100, 1001}) {
    std::vector<float> scores(n);
    std::vector<uint16_t> keys(n);
    for (int j = 0; j < n; ++j) {
      // Many ties, and both zeros (x * -1 gives -0 for x = 0).
      scores[j] = float(int(rng() % 21) - 10) * 0.5f * (j % 7 == 0 ? -1.0f : 1.0f);
      keys[j] = static_cast<uint16_t>(rng() % 30 + (j % 5 == 0 ? 65000 : 30000));
    }
    for (const int k : {-1, 0, 1, n / 3, n - 1, n, n + 5}) {
      EXPECT_EQ(topk_select(scores.data(), n, k), sorted_top_k(scores, k)) << n << " " << k;
      EXPECT_EQ(topk_select(keys.data(), n, k), sorted_top_k(keys, k)) << n << " " << k;
    }
  }
}

TEST(TopkSelect, ZerosOfEitherSignTie) {
  const std::vector<float> scores = {0.0f, -0.0f, 0.0f, -1.0f};
  EXPECT_EQ(topk_select(scores.data(), 4, 2), (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace kvb::kernels
