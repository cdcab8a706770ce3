// Page min/max bounds on the GPU (Quest's page metadata, docs/methods.md §10). CPU twin:
// kernels/cpu/page_bounds.h (one KV head at a time); the selector: policies/quest.cc. Tests:
// tests/cuda/backend_ops_test.cc, tests/cuda/quest_kernels_test.cc.
//
// A "slot" is one (sequence, KV head) pair, slot = b * Hkv + h. Page p of a slot holds tokens
// p*P .. p*P+P-1 (P = page_size, 16 by default; the last page may be partial).
//   update_page_bounds   elementwise min/max of the keys of every page that tokens [begin, end)
//                        touch, recomputed from the page's first token: after prefill over [0, L),
//                        after each decode token over [T-1, T) (equal to the incremental update);
//                        bf16 like the keys, so the bounds are exact; stored chunk-major (below) so
//                        that threads scoring consecutive pages read consecutive 16-byte words;
//   page_bound_scores    U(page) = sum_i max(q_i m_i, q_i M_i), summed in f32 in dimension order
//                        (the CPU's order, so the scores are equal); per query head ("per_head",
//                        the reference) or the max over the group ("shared");
//   topk_select          (kernels/cuda/topk_select.h) over the page scores, K_p pages per list;
//   expand_pages   selected pages -> token index lists for decode_attention.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

// Bounds layout: slot s, page p, dimension t at  s * page_slot_stride + page_bound_offset(p, t,
// max_pages) with page_slot_stride >= max_pages * head_dim (max_pages: the page capacity of a
// slot).
__host__ __device__ inline int64_t page_bound_offset(int page, int dim, int max_pages) {
  return (int64_t(dim / 8) * max_pages + page) * 8 + dim % 8;
}

struct PageBoundsArgs {
  const __nv_bfloat16* keys =
      nullptr;  // slot s, token j: keys + s * key_slot_stride + j * head_dim
  int64_t key_slot_stride = 0;
  int n_slots = 0;
  int head_dim = 0;
  int page_size = 16;
  int begin = 0, end = 0;  // the tokens added; pages touched are rebuilt from their first token
  __nv_bfloat16* page_min = nullptr;  // layout: page_bound_offset
  __nv_bfloat16* page_max = nullptr;
  int64_t page_slot_stride = 0;
  int max_pages = 0;
  // Optional (device, per slot): update only the page holding token lengths[s] - 1 of each slot
  // (begin / end ignored), the decode-step form that stays valid in a captured CUDA graph.
  const int32_t* lengths = nullptr;
};
void update_page_bounds(const PageBoundsArgs& args, cudaStream_t stream);

struct PageScoreArgs {
  const __nv_bfloat16* q = nullptr;  // [B, Hq, head_dim] with q_seq_stride between sequences
  int64_t q_seq_stride = 0;
  int batch = 0, n_query_heads = 0, n_kv_heads = 0, head_dim = 0;  // head_dim % 8 == 0, group <= 16
  const __nv_bfloat16* page_min = nullptr;
  const __nv_bfloat16* page_max = nullptr;
  int64_t page_slot_stride = 0;
  int max_pages = 0;
  int n_pages = 0;
  bool shared = false;          // one list per slot (max over the group) instead of per query head
  bool keep_last_page = false;  // the last page scores +inf (Quest's kernel variant)
  // List l (query head b*Hq+a, or slot when shared), page p: scores + l * score_stride + p.
  float* scores = nullptr;
  int64_t score_stride = 0;
  // Optional (device, per slot): the slot holds ceil(lengths[s] / page_size) pages; pages from
  // there to n_pages (then the fixed width scored) get -inf, keep_last_page marks the slot's own
  // last page. Lets a captured decode step score a growing cache.
  const int32_t* lengths = nullptr;
  int page_size = 16;
};
void page_bound_scores(const PageScoreArgs& args, cudaStream_t stream);

// For each list l, expands the `n_selected` pages at pages + l * page_stride (ascending, from
// topk_select) into their tokens (< length), written at indices + l * index_stride, and fills
// decode_attention's index_offset / index_count for the heads_per_list query heads of list l.
struct ExpandPagesArgs {
  const int32_t* pages = nullptr;
  int64_t page_stride = 0;
  int n_lists = 0;
  int n_selected = 0;
  int page_size = 16;
  int length = 0;
  int32_t* indices = nullptr;
  int64_t index_stride = 0;
  int heads_per_list = 1;
  int64_t* index_offset = nullptr;
  int32_t* index_count = nullptr;
  // Optional (device): list l's length is lengths[l / lists_per_slot] instead of `length`.
  const int32_t* lengths = nullptr;
  int lists_per_slot = 1;
};
void expand_pages(const ExpandPagesArgs& args, cudaStream_t stream);

// The page budget of one step as the CPU selector computes it: min(max(min_pages, B / P), n_pages)
// with B = min(length, token_budget).
inline int pages_for_budget(int length, int token_budget, int page_size, int min_pages) {
  const int n_pages = (length + page_size - 1) / page_size;
  const int budget = length < token_budget ? length : token_budget;
  const int pages = budget / page_size > min_pages ? budget / page_size : min_pages;
  return pages < n_pages ? pages : n_pages;
}

}  // namespace kvb::cuda
