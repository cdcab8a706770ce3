// Page min/max bounds (kernels/cpu/page_bounds.h): the bound holds for every key of a page, pages
// built token by token equal pages built at once, and kept pages expand to their entries.
#include "kernels/cpu/page_bounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "tests/kernels/random_vectors.h"

namespace kvb::kernels {
namespace {

using test::random_vector;

TEST(PageBounds, UpperBoundIsAtLeastTheTrueMaximumLogitOfEveryPage) {
  std::mt19937 rng(3);
  for (int page_size : {1, 5, 16}) {
    const int d = 24, n = 203;  // a partial last page
    const std::vector<float> keys = random_vector(rng, static_cast<size_t>(n) * d, 2.0f);
    PageBounds bounds{.page_size = page_size, .head_dim = d};
    update_page_bounds(bounds, keys.data(), 0, n);
    ASSERT_EQ(bounds.n_pages(), (n + page_size - 1) / page_size);
    for (int trial = 0; trial < 30; ++trial) {
      const std::vector<float> q = random_vector(rng, d, 1.5f);
      const std::vector<float> upper = page_bound_scores(bounds, q.data());
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

// A prompt at once, then one entry at a time (a decode step's update): the same bounds, bit for
// bit, as pages built over the whole range in one call.
TEST(PageBounds, EntriesAddedOneByOneEqualOneBuild) {
  std::mt19937 rng(4);
  const int d = 16, prompt = 37, n = 70;
  const std::vector<float> keys = random_vector(rng, static_cast<size_t>(n) * d, 1.0f);
  PageBounds grown{.page_size = 16, .head_dim = d}, built = grown;
  update_page_bounds(grown, keys.data(), 0, prompt);
  for (int j = prompt; j < n; ++j) update_page_bounds(grown, keys.data(), j, j + 1);
  update_page_bounds(built, keys.data(), 0, n);
  EXPECT_EQ(grown.minimum, built.minimum);
  EXPECT_EQ(grown.maximum, built.maximum);
  ASSERT_EQ(built.n_pages(), 5);
  for (int i = 0; i < d; ++i) {  // the last page holds entries 64 .. 69
    float lo = keys[64 * d + i], hi = lo;
    for (int j = 65; j < n; ++j) {
      lo = std::min(lo, keys[j * d + i]);
      hi = std::max(hi, keys[j * d + i]);
    }
    EXPECT_EQ(built.minimum[4 * d + i], lo);
    EXPECT_EQ(built.maximum[4 * d + i], hi);
  }
}

TEST(PageBounds, ExpandPagesListsTheirEntriesBelowTheLength) {
  EXPECT_EQ(expand_pages({0, 2, 3}, 4, 14),
            (std::vector<int32_t>{0, 1, 2, 3, 8, 9, 10, 11, 12, 13}));
  EXPECT_TRUE(expand_pages({}, 16, 100).empty());
}

}  // namespace
}  // namespace kvb::kernels
