// Quest (docs/methods.md §10): the page budget and the metadata kept current as tokens arrive
// (the page bound itself: tests/kernels/page_bounds_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kernels/cpu/page_bounds.h"
#include "policies/decode_selectors.h"
#include "tests/policies/decode_test_util.h"

namespace kvb {
namespace {

// K_p = min(max(3, floor(B / 16)), n_pages) pages with the largest bounds, per query head.
TEST(QuestSelector, SelectsTheTopBoundedPagesWithAtLeastThree) {
  const int kv_heads = 2, group = 2, d = 16, length = 200;  // 13 pages, the last one of 8
  KvStore store = test::random_store(3, kv_heads, d, length, 7);
  for (int budget : {20, 64, 1000}) {
    auto selector = make_quest_selector({}, Budget::parse(std::to_string(budget)));
    selector->start(store, length, budget);
    const std::vector<float> query = test::random_vector(kv_heads * group * d, budget);
    Selection selection = test::empty_selection(kv_heads * group);
    selector->select(2, query.data(), store, selection);
    const int pages = std::min(std::max(3, std::min(budget, length) / 16), 13);
    for (int a = 0; a < kv_heads * group; ++a) {
      kernels::PageBounds bounds{.head_dim = d};
      kernels::update_page_bounds(bounds, store.keys(2, a / group), 0, length);
      const std::vector<float> upper = kernels::page_bound_scores(bounds, query.data() + a * d);
      std::vector<int32_t> order = test::all_indices(13);
      std::sort(order.begin(), order.end(), [&](int x, int y) { return upper[x] > upper[y]; });
      std::set<int32_t> expected;
      for (int r = 0; r < pages; ++r)
        for (int j = order[r] * 16; j < std::min(length, order[r] * 16 + 16); ++j)
          expected.insert(j);
      EXPECT_EQ(std::set<int32_t>(selection.indices[a].begin(), selection.indices[a].end()),
                expected)
          << "budget " << budget << " head " << a;
    }
  }
}

// Decode tokens join the pages; incremental min/max equals metadata rebuilt from the whole cache.
TEST(QuestSelector, IncrementalPagesEqualARebuild) {
  const int d = 16, prompt = 40, steps = 30;
  KvStore grown = test::random_store(1, 1, d, prompt, 8);
  auto incremental =
      make_quest_selector({{"dense_layers", nlohmann::json::array()}}, Budget::parse("48"));
  incremental->start(grown, prompt, 48);
  for (int step = 0; step < steps; ++step) {
    const std::vector<float> kv = test::random_vector(d, 100 + step);
    grown.append(0, prompt + step, kv.data(), kv.data());
    incremental->on_append(grown, 0);
  }
  auto rebuilt =
      make_quest_selector({{"dense_layers", nlohmann::json::array()}}, Budget::parse("48"));
  rebuilt->start(grown, prompt + steps, 48);
  for (int trial = 0; trial < 10; ++trial) {
    const std::vector<float> query = test::random_vector(d, 500 + trial);
    Selection a = test::empty_selection(1), b = test::empty_selection(1);
    incremental->select(0, query.data(), grown, a);
    rebuilt->select(0, query.data(), grown, b);
    EXPECT_EQ(a.indices, b.indices);
  }
}

TEST(QuestSelector, SharedGroupAndKeepLastPageVariants) {
  const int group = 3, d = 16, length = 300;
  KvStore store = test::random_store(1, 1, d, length, 9);
  auto selector = make_quest_selector(
      {{"dense_layers", nlohmann::json::array()}, {"gqa", "shared"}, {"keep_last_page", true}},
      Budget::parse("48"));
  selector->start(store, length, 48);
  EXPECT_EQ(selector->describe()["gqa"], "shared");
  for (int trial = 0; trial < 10; ++trial) {
    const std::vector<float> query = test::random_vector(group * d, 70 + trial);
    Selection selection = test::empty_selection(group);
    selector->select(0, query.data(), store, selection);
    EXPECT_EQ(selection.indices[0], selection.indices[1]);
    EXPECT_EQ(selection.indices[0], selection.indices[2]);
    EXPECT_EQ(selection.indices[0].size(), 3u * 16 - 4) << "3 pages, the last of 12 tokens";
    EXPECT_EQ(selection.indices[0].back(), length - 1) << "the last page is always kept";
  }
}

}  // namespace
}  // namespace kvb
