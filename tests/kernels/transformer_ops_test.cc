// argmax_rows (kernels/cpu/transformer_ops.h) against rows written by hand: the largest entry of
// each row, the lowest index of tied maxima, 0 for a row of -inf.
#include "kernels/cpu/transformer_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvb::kernels {
namespace {

TEST(ArgmaxRows, PicksEachRowsLargestEntryAndTheLowestIndexOfATie) {
  const float inf = INFINITY;
  const std::vector<float> logits = {0.5f,  2.0f,  -1.0f, 2.0f,   // tie: 1 and 3
                                     -3.0f, -2.0f, -7.0f, -2.5f,  // all negative
                                     -inf,  -inf,  -inf,  -inf,   // nothing finite
                                     1.0f,  1.0f,  1.0f,  9.0f};  // the last entry
  std::vector<int32_t> next(4, -1);
  argmax_rows(logits.data(), 4, 4, next.data());
  EXPECT_EQ(next, (std::vector<int32_t>{1, 1, 0, 3}));
}

}  // namespace
}  // namespace kvb::kernels
