// Quest's page bounds on the device (kernels/cuda/page_bounds.h) as the tests drive them: the
// bounds of a set of slots built range by range, read back as rows, and scored. Shared by the
// backend-ops test (backend_ops_selection.h) and Quest's own (quest_kernels_test.cc).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/page_bounds.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

// Device page bounds for [slots, max_pages, d], built over [0, prompt) then token by token.
struct DevicePages {
  DevicePages(const cuda::DeviceBuffer& keys, int slots, int capacity, int d, int page_size = 16)
      : max_pages((capacity + page_size - 1) / page_size),
        minimum(size_t(slots) * max_pages * d * 2),
        maximum(size_t(slots) * max_pages * d * 2) {
    args.keys = keys.as<__nv_bfloat16>();
    args.key_slot_stride = int64_t(capacity) * d;
    args.n_slots = slots;
    args.head_dim = d;
    args.page_size = page_size;
    args.page_min = minimum.as<__nv_bfloat16>();
    args.page_max = maximum.as<__nv_bfloat16>();
    args.page_slot_stride = int64_t(max_pages) * d;
    args.max_pages = max_pages;
  }
  // Slot s's bounds as [n_pages, d] rows (undoing the chunk-major layout).
  std::vector<float> rows(const cuda::DeviceBuffer& bounds, int slot, int n_pages, int d) const {
    const std::vector<float> all = from_device_bf16(bounds, bounds.bytes() / 2);
    std::vector<float> out(size_t(n_pages) * d);
    for (int p = 0; p < n_pages; ++p)
      for (int t = 0; t < d; ++t)
        out[size_t(p) * d + t] =
            all[slot * args.page_slot_stride + cuda::page_bound_offset(p, t, max_pages)];
    return out;
  }
  void add(int begin, int end) {
    args.begin = begin;
    args.end = end;
    cuda::update_page_bounds(args, nullptr);
  }
  int max_pages;
  cuda::DeviceBuffer minimum, maximum;
  cuda::PageBoundsArgs args;
};

// Runs page_bound_scores for one sequence's query heads (device bf16 q, [hq, d]) into `scores`,
// [lists, n_pages] f32: a list per query head, or per KV head when shared.
inline void score_pages(const DevicePages& pages, const cuda::DeviceBuffer& q, int hq, int hkv,
                        int d, int n_pages, bool shared, bool keep_last_page,
                        cuda::DeviceBuffer& scores) {
  cuda::page_bound_scores({.q = q.as<__nv_bfloat16>(),
                           .q_seq_stride = int64_t(hq) * d,
                           .batch = 1,
                           .n_query_heads = hq,
                           .n_kv_heads = hkv,
                           .head_dim = d,
                           .page_min = pages.minimum.as<__nv_bfloat16>(),
                           .page_max = pages.maximum.as<__nv_bfloat16>(),
                           .page_slot_stride = pages.args.page_slot_stride,
                           .max_pages = pages.max_pages,
                           .n_pages = n_pages,
                           .shared = shared,
                           .keep_last_page = keep_last_page,
                           .scores = scores.as<float>(),
                           .score_stride = n_pages},
                          nullptr);
}

// The same from host query heads, the scores brought back.
inline std::vector<float> page_scores(const DevicePages& pages, const std::vector<float>& q, int hq,
                                      int hkv, int d, int n_pages, bool shared,
                                      bool keep_last_page) {
  const auto d_q = to_device_bf16(q);
  const size_t count = size_t(shared ? hkv : hq) * n_pages;
  cuda::DeviceBuffer d_scores(count * 4);
  score_pages(pages, d_q, hq, hkv, d, n_pages, shared, keep_last_page, d_scores);
  cuda::check(cudaDeviceSynchronize(), "sync");
  return from_device<float>(d_scores, count);
}

}  // namespace kvb::test
