// Quest's page metadata (docs/methods.md §10): elementwise key minimum and maximum per page of
// `page_size` entries, and the upper bound U(page) = sum_i max(q_i m_i, q_i M_i) of q.k over a page.
#pragma once

#include <cstdint>
#include <vector>

namespace kvb {

struct QuestPageBounds {
  int page_size = 16;
  int head_dim = 0;
  std::vector<float> minimum;  // [n_pages, head_dim]
  std::vector<float> maximum;  // [n_pages, head_dim]

  int n_pages() const {
    return head_dim == 0 ? 0 : static_cast<int>(minimum.size() / head_dim);
  }
  // Adds entry `index` (entries arrive in order 0, 1, 2, ...); a new page starts every page_size.
  void add(const float* key, int index);
  // U(page) for every page.
  std::vector<float> upper_bounds(const float* query) const;
};

}  // namespace kvb
