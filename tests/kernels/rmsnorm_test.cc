// rmsnorm and add_rmsnorm (kernels/cpu/rmsnorm.h) against values worked by hand: the row [3, 4]
// has mean square 12.5, so with eps 0 each entry is divided by sqrt(12.5) = 3.5355339.
#include "kernels/cpu/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvb::kernels {
namespace {

TEST(Rmsnorm, DividesEachRowByItsRootMeanSquareTimesTheWeight) {
  const std::vector<float> x = {3.f, 4.f, 1.f, 1.f};
  const std::vector<float> weight = {1.f, 2.f};
  std::vector<float> y(4);
  rmsnorm(x.data(), weight.data(), 2, 2, 0.f, y.data());
  const float inv = 1.f / std::sqrt(12.5f);
  EXPECT_NEAR(y[0], 3.f * inv, 1e-6);
  EXPECT_NEAR(y[1], 8.f * inv, 1e-6);
  EXPECT_NEAR(y[2], 1.f, 1e-6);  // [1, 1]: mean square 1
  EXPECT_NEAR(y[3], 2.f, 1e-6);
}

TEST(Rmsnorm, AddRmsnormAddsTheDeltaIntoTheResidualFirst) {
  std::vector<float> residual = {1.f, 3.f};
  const std::vector<float> delta = {2.f, 1.f};  // the sum is [3, 4]
  const std::vector<float> weight = {1.f, 1.f};
  std::vector<float> y(2);
  add_rmsnorm(residual.data(), delta.data(), weight.data(), 1, 2, 0.f, y.data());
  EXPECT_EQ(residual, (std::vector<float>{3.f, 4.f}));
  EXPECT_NEAR(y[0], 3.f / std::sqrt(12.5f), 1e-6);
  EXPECT_NEAR(y[1], 4.f / std::sqrt(12.5f), 1e-6);
}

TEST(Rmsnorm, AddRmsnormWithoutADeltaIsRmsnorm) {
  std::vector<float> residual = {3.f, 4.f};
  const std::vector<float> weight = {1.f, 1.f};
  std::vector<float> y(2);
  add_rmsnorm(residual.data(), nullptr, weight.data(), 1, 2, 1e-5f, y.data());
  EXPECT_EQ(residual, (std::vector<float>{3.f, 4.f}));
  EXPECT_NEAR(y[0], 3.f / std::sqrt(12.5f + 1e-5f), 1e-6);
}

}  // namespace
}  // namespace kvb::kernels
