// with_constant (kernels/cuda/dispatch.h): each value reaches the instantiation compiled for it,
// results and void calls pass through, and a value nobody was built for is refused with the input,
// the value and the choices in the message.
#include "kernels/cuda/dispatch.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace kvb::cuda {
namespace {

TEST(WithConstant, CallsTheInstantiationOfEachValue) {
  for (int value : {64, 128, 256}) {
    const int seen = with_constant<64, 128, 256>(value, "head_dim", [](auto dim) {
      static_assert(decltype(dim)::value == 64 || decltype(dim)::value == 128 ||
                    decltype(dim)::value == 256);
      return decltype(dim)::value;
    });
    EXPECT_EQ(seen, value);
  }
  int calls = 0, last = 0;
  with_constant<1, 2, 4>(2, "row tiles", [&](auto tiles) {
    ++calls;
    last = decltype(tiles)::value;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(last, 2);
}

TEST(WithConstant, RefusesAValueNotBuiltForNamingTheChoices) {
  int calls = 0;
  const auto count = [&](auto) { ++calls; };
  try {
    with_constant<64, 128>(96, "decode_attention: head_dim", count);
    FAIL() << "head_dim 96 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "decode_attention: head_dim 96 unsupported (64 or 128)");
  }
  try {
    with_constant<64, 128, 256>(0, "window_attention_sums: head_dim", count);
    FAIL() << "head_dim 0 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "window_attention_sums: head_dim 0 unsupported (64, 128 or 256)");
  }
  EXPECT_THROW(with_constant<4>(3, "x", count), std::invalid_argument);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(with_constant<4>(4, "x", [](auto v) { return decltype(v)::value; }), 4);
}

}  // namespace
}  // namespace kvb::cuda
