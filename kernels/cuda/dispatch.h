// A size known at run time picks the kernel instantiation compiled for it:
//   with_constant<64, 128>(args.head_dim, "decode_attention: head_dim", [&](auto dim) { ... })
// calls the lambda with std::integral_constant<int, 64> or <int, 128> (so `decltype(dim)::value` is
// a template argument) and refuses any other value, naming the input and the values built for.
// Plain C++ (no CUDA): tests/kernels/dispatch_test.cc runs it on the CPU.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace kvb::cuda {
namespace dispatch_detail {

// "64 or 128", "64, 128 or 256".
template <int kFirst, int... kRest>
std::string choices() {
  std::string out = std::to_string(kFirst);
  int left = sizeof...(kRest);
  ((out += (--left == 0 ? " or " : ", ") + std::to_string(kRest)), ...);
  return out;
}

template <int kFirst, int... kRest, typename Fn>
decltype(auto) call_with(int value, Fn&& fn) {
  if constexpr (sizeof...(kRest) == 0) {
    return fn(std::integral_constant<int, kFirst>{});  // with_constant checked the value
  } else {
    if (value == kFirst) return fn(std::integral_constant<int, kFirst>{});
    return call_with<kRest...>(value, std::forward<Fn>(fn));
  }
}

}  // namespace dispatch_detail

template <int... kValues, typename Fn>
decltype(auto) with_constant(int value, const char* what, Fn&& fn) {
  static_assert(sizeof...(kValues) > 0, "with_constant needs at least one value");
  if (((value != kValues) && ...))
    throw std::invalid_argument(std::string(what) + " " + std::to_string(value) + " unsupported (" +
                                dispatch_detail::choices<kValues...>() + ")");
  return dispatch_detail::call_with<kValues...>(value, std::forward<Fn>(fn));
}

}  // namespace kvb::cuda
