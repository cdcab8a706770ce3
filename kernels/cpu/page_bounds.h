// Page min/max bounds (Quest's page metadata, docs/methods.md §10), one KV head at a time: the CPU
// twin of kernels/cuda/page_bounds.h (which holds every (sequence, KV head) slot at once, in bf16
// like the keys, so its bounds equal these exactly).
//
// Page p holds entries p*P .. p*P + P - 1 (P = page_size; the last page may be partial), and keeps
// the elementwise minimum m and maximum M of its keys. A query q bounds every key of a page:
//   U(page) = Σ_i max(q_i m_i, q_i M_i) >= max_{j in page} q.k_j.
//   update_page_bounds  the pages that entries [begin, end) touch, rebuilt from their first entry
//                       (after prefill over [0, L), after each decode entry over [T-1, T));
//   page_bound_scores   U of every page, summed in f32 in dimension order (the device's order);
//   topk_select         (kernels/cpu/topk_select.h) over the scores: the pages kept;
//   expand_pages        the kept pages (ascending) -> their entries, the index list attended.
#pragma once

#include <cstdint>
#include <vector>

namespace kvb::kernels {

// The bounds start empty ({}: a designated initialiser of the sizes may leave them out).
struct PageBounds {
  int page_size = 16;
  int head_dim = 0;
  std::vector<float> minimum{};  // [n_pages, head_dim]
  std::vector<float> maximum{};  // [n_pages, head_dim]

  int n_pages() const { return head_dim == 0 ? 0 : static_cast<int>(minimum.size() / head_dim); }
};

// keys: the head's entries [end, head_dim] (entry j at keys + j * head_dim). Pages from the one
// holding `begin` on are rebuilt, so every entry before `begin` in that page must be present.
void update_page_bounds(PageBounds& bounds, const float* keys, int begin, int end);

// U(page) for every page of `bounds`.
std::vector<float> page_bound_scores(const PageBounds& bounds, const float* query);

// The entries (< length) of `pages` (ascending), in order.
std::vector<int32_t> expand_pages(const std::vector<int32_t>& pages, int page_size, int length);

}  // namespace kvb::kernels
