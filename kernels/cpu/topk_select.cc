#include "kernels/cpu/topk_select.h"

#include <algorithm>
#include <numeric>

namespace kvb::kernels {
namespace {

template <typename Key>
std::vector<int32_t> select(const Key* keys, int n, int k) {
  k = std::clamp(k, 0, n);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto better = [keys](int32_t a, int32_t b) {
    return keys[a] > keys[b] || (keys[a] == keys[b] && a < b);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), better);
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

std::vector<int32_t> topk_select(const float* scores, int n, int k) { return select(scores, n, k); }

std::vector<int32_t> topk_select(const uint16_t* keys, int n, int k) { return select(keys, n, k); }

}  // namespace kvb::kernels
