// Quest (docs/methods.md §10): the page bound, the page budget and incremental metadata.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "policies/decode_selectors.h"
#include "policies/quest.h"
#include "tests/policies/decode_test_util.h"

namespace kvb {
namespace {

TEST(QuestPageBounds, UpperBoundIsAtLeastTheTrueMaximumLogitOfEveryPage) {
  for (int page_size : {1, 5, 16}) {
    const int d = 24, n = 203;  // a partial last page
    const std::vector<float> keys = test::random_vector(static_cast<size_t>(n) * d, page_size, 2.0f);
    QuestPageBounds bounds;
    bounds.page_size = page_size;
    bounds.head_dim = d;
    for (int j = 0; j < n; ++j) bounds.add(keys.data() + static_cast<size_t>(j) * d, j);
    ASSERT_EQ(bounds.n_pages(), (n + page_size - 1) / page_size);
    for (int trial = 0; trial < 30; ++trial) {
      const std::vector<float> q = test::random_vector(d, 1000 + trial, 1.5f);
      const std::vector<float> upper = bounds.upper_bounds(q.data());
      for (int p = 0; p < bounds.n_pages(); ++p) {
        double page_max = -1e30;
        for (int j = p * page_size; j < std::min(n, (p + 1) * page_size); ++j) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += double{q[i]} * keys[static_cast<size_t>(j) * d + i];
          page_max = std::max(page_max, dot);
        }
        EXPECT_GE(upper[p], page_max - 1e-4) << "page " << p << " size " << page_size;
        if (page_size == 1) {
          EXPECT_NEAR(upper[p], page_max, 1e-3) << "a one-key page is tight";
        }
      }
    }
  }
}

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
      QuestPageBounds bounds;
      bounds.head_dim = d;
      for (int j = 0; j < length; ++j) bounds.add(store.keys(2, a / group) + j * d, j);
      const std::vector<float> upper = bounds.upper_bounds(query.data() + a * d);
      std::vector<int32_t> order = test::all_indices(13);
      std::sort(order.begin(), order.end(), [&](int x, int y) { return upper[x] > upper[y]; });
      std::set<int32_t> expected;
      for (int r = 0; r < pages; ++r)
        for (int j = order[r] * 16; j < std::min(length, order[r] * 16 + 16); ++j) expected.insert(j);
      EXPECT_EQ(std::set<int32_t>(selection.indices[a].begin(), selection.indices[a].end()), expected)
          << "budget " << budget << " head " << a;
    }
  }
}

// Decode tokens join the pages; incremental min/max equals metadata rebuilt from the whole cache.
TEST(QuestSelector, IncrementalPagesEqualARebuild) {
  const int d = 16, prompt = 40, steps = 30;
  KvStore grown = test::random_store(1, 1, d, prompt, 8);
  auto incremental = make_quest_selector({{"dense_layers", nlohmann::json::array()}}, Budget::parse("48"));
  incremental->start(grown, prompt, 48);
  for (int step = 0; step < steps; ++step) {
    const std::vector<float> kv = test::random_vector(d, 100 + step);
    grown.append(0, prompt + step, kv.data(), kv.data());
    incremental->on_append(grown, 0);
  }
  auto rebuilt = make_quest_selector({{"dense_layers", nlohmann::json::array()}}, Budget::parse("48"));
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
