#include "kernels/cpu/page_bounds.h"

#include <algorithm>

namespace kvb::kernels {

void update_page_bounds(PageBounds& bounds, const float* keys, int begin, int end) {
  if (end <= begin) return;
  const int d = bounds.head_dim, size = bounds.page_size;
  const int first_page = begin / size, pages = (end + size - 1) / size;
  bounds.minimum.resize(static_cast<size_t>(pages) * d);
  bounds.maximum.resize(static_cast<size_t>(pages) * d);
  for (int p = first_page; p < pages; ++p) {
    float* lo = bounds.minimum.data() + static_cast<int64_t>(p) * d;
    float* hi = bounds.maximum.data() + static_cast<int64_t>(p) * d;
    const float* first = keys + static_cast<int64_t>(p) * size * d;
    std::copy_n(first, d, lo);
    std::copy_n(first, d, hi);
    for (int j = p * size + 1; j < std::min(end, (p + 1) * size); ++j) {
      const float* key = keys + static_cast<int64_t>(j) * d;
      for (int i = 0; i < d; ++i) {
        lo[i] = std::min(lo[i], key[i]);
        hi[i] = std::max(hi[i], key[i]);
      }
    }
  }
}

std::vector<float> page_bound_scores(const PageBounds& bounds, const float* query) {
  const int d = bounds.head_dim;
  std::vector<float> scores(bounds.n_pages());
  for (int p = 0; p < bounds.n_pages(); ++p) {
    const float* lo = bounds.minimum.data() + static_cast<int64_t>(p) * d;
    const float* hi = bounds.maximum.data() + static_cast<int64_t>(p) * d;
    float sum = 0;
    for (int i = 0; i < d; ++i) sum += std::max(query[i] * lo[i], query[i] * hi[i]);
    scores[p] = sum;
  }
  return scores;
}

std::vector<int32_t> expand_pages(const std::vector<int32_t>& pages, int page_size, int length) {
  std::vector<int32_t> entries;
  for (int32_t page : pages)
    for (int j = page * page_size; j < std::min(length, (page + 1) * page_size); ++j)
      entries.push_back(j);
  return entries;
}

}  // namespace kvb::kernels
