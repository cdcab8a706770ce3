// Page bound kernels: page min/max, page upper bounds, page -> token expansion. Contracts:
// kernels/cuda/page_bounds.h; CPU twin: kernels/cpu/page_bounds.cc.
#include <cuda_bf16.h>

#include <stdexcept>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/page_bounds.h"

namespace kvb::cuda {
namespace {

// Block (touched page, slot), thread = dimension.
__global__ void update_pages_kernel(PageBoundsArgs args) {
  wait_for_predecessor();  // launched with launch_overlapped: nothing read before this
  allow_successor_launch();
  const int slot = blockIdx.y;
  const int end = args.lengths ? args.lengths[slot] : args.end;
  if (end <= 0) return;
  const int page =
      args.lengths ? (end - 1) / args.page_size : args.begin / args.page_size + blockIdx.x;
  const int first = page * args.page_size;
  const int last = min(end, first + args.page_size);
  const __nv_bfloat16* keys = args.keys + slot * args.key_slot_stride;
  for (int t = threadIdx.x; t < args.head_dim; t += blockDim.x) {
    float lo = __bfloat162float(keys[int64_t(first) * args.head_dim + t]), hi = lo;
    for (int j = first + 1; j < last; ++j) {
      const float x = __bfloat162float(keys[int64_t(j) * args.head_dim + t]);
      lo = fminf(lo, x);
      hi = fmaxf(hi, x);
    }
    const int64_t at = slot * args.page_slot_stride + page_bound_offset(page, t, args.max_pages);
    args.page_min[at] = __float2bfloat16(lo);  // exact: lo and hi are bf16 values
    args.page_max[at] = __float2bfloat16(hi);
  }
}

constexpr int kScoreThreads = 256;
constexpr int kMaxGroup = 16;

struct alignas(16) Bf16x8 {
  __nv_bfloat162 v[4];
};

// Thread = page; the group's queries sit in shared memory. Sums run in dimension order (the CPU's);
// the chunk-major layout makes each 16-byte load of a warp one contiguous 512-byte read, and the
// next chunk's loads are issued before the current chunk's arithmetic. G: the GQA group when it is
// a compile-time constant (common models), 0 for any group up to kMaxGroup.
template <int D, int G>
__global__ void __launch_bounds__(kScoreThreads) page_scores_kernel(PageScoreArgs args) {
  constexpr int kSlots = G > 0 ? G : kMaxGroup;
  extern __shared__ float s_q[];  // [group][D]
  wait_for_predecessor();         // launched with launch_overlapped: nothing read before this
  allow_successor_launch();
  const int slot = blockIdx.y;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  const int group = G > 0 ? G : args.n_query_heads / args.n_kv_heads;
  const __nv_bfloat16* q = args.q + b * args.q_seq_stride + int64_t(h) * group * D;
  for (int i = threadIdx.x; i < group * D; i += kScoreThreads) s_q[i] = __bfloat162float(q[i]);
  __syncthreads();
  const int page = blockIdx.x * kScoreThreads + threadIdx.x;
  if (page >= args.n_pages) return;
  const int slot_pages =
      args.lengths ? (args.lengths[slot] + args.page_size - 1) / args.page_size : args.n_pages;
  if (page >= slot_pages) {  // not in this slot's cache yet
    for (int a = 0; a < (args.shared ? 1 : group); ++a) {
      const int64_t list = args.shared ? slot : int64_t(b) * args.n_query_heads + h * group + a;
      args.scores[list * args.score_stride + page] = -INFINITY;
    }
    return;
  }
  const int64_t chunk_stride = args.max_pages;  // in 8-element words
  const Bf16x8* lo_row = reinterpret_cast<const Bf16x8*>(
      args.page_min + slot * args.page_slot_stride + int64_t(page) * 8);
  const Bf16x8* hi_row = reinterpret_cast<const Bf16x8*>(
      args.page_max + slot * args.page_slot_stride + int64_t(page) * 8);
  float sum[kSlots];
#pragma unroll
  for (int a = 0; a < kSlots; ++a) sum[a] = 0.f;
  Bf16x8 lo8 = lo_row[0], hi8 = hi_row[0];
#pragma unroll 4
  for (int c = 0; c < D / 8; ++c) {
    Bf16x8 next_lo = lo8, next_hi = hi8;
    if (c + 1 < D / 8) {
      next_lo = lo_row[(c + 1) * chunk_stride];
      next_hi = hi_row[(c + 1) * chunk_stride];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float lo = e % 2 ? __high2float(lo8.v[e / 2]) : __low2float(lo8.v[e / 2]);
      const float hi = e % 2 ? __high2float(hi8.v[e / 2]) : __low2float(hi8.v[e / 2]);
      const int t = c * 8 + e;
#pragma unroll
      for (int a = 0; a < kSlots; ++a) {
        if (G > 0 || a < group) {
          const float qi = s_q[a * D + t];
          sum[a] += fmaxf(__fmul_rn(qi, lo), __fmul_rn(qi, hi));
        }
      }
    }
    lo8 = next_lo;
    hi8 = next_hi;
  }
  const bool last = args.keep_last_page && page == slot_pages - 1;
  if (args.shared) {
    float best = sum[0];
#pragma unroll
    for (int a = 1; a < kSlots; ++a)
      if (G > 0 || a < group) best = fmaxf(best, sum[a]);
    args.scores[slot * args.score_stride + page] = last ? INFINITY : best;
  } else {
#pragma unroll
    for (int a = 0; a < kSlots; ++a)
      if (G > 0 || a < group)
        args.scores[(int64_t(b) * args.n_query_heads + h * group + a) * args.score_stride + page] =
            last ? INFINITY : sum[a];
  }
}

template <int D>
void launch_page_scores(const PageScoreArgs& args, dim3 grid, size_t smem, cudaStream_t stream) {
  switch (args.n_query_heads / args.n_kv_heads) {
    case 3:
      launch_overlapped(page_scores_kernel<D, 3>, grid, kScoreThreads, smem, stream, "page_scores",
                        args);
      break;
    case 4:
      launch_overlapped(page_scores_kernel<D, 4>, grid, kScoreThreads, smem, stream, "page_scores",
                        args);
      break;
    case 7:
      launch_overlapped(page_scores_kernel<D, 7>, grid, kScoreThreads, smem, stream, "page_scores",
                        args);
      break;
    default:
      launch_overlapped(page_scores_kernel<D, 0>, grid, kScoreThreads, smem, stream, "page_scores",
                        args);
      break;
  }
}

// Block = list. Ascending pages: only the last page of the cache can be partial and it comes last,
// so selected page r starts at position r * P.
__global__ void expand_pages_kernel(ExpandPagesArgs args) {
  wait_for_predecessor();  // launched with launch_overlapped: nothing read before this
  allow_successor_launch();
  const int list = blockIdx.x;
  const int32_t* pages = args.pages + list * args.page_stride;
  int32_t* out = args.indices + list * args.index_stride;
  const int total = args.n_selected * args.page_size;
  const int length = args.lengths ? args.lengths[list / args.lists_per_slot] : args.length;
  for (int n = threadIdx.x; n < total; n += blockDim.x) {
    const int token = pages[n / args.page_size] * args.page_size + n % args.page_size;
    if (token < length) out[n] = token;
  }
  if (args.index_offset && threadIdx.x < args.heads_per_list) {
    int count = 0;
    if (args.n_selected > 0) {
      const int last_first = pages[args.n_selected - 1] * args.page_size;
      count = (args.n_selected - 1) * args.page_size + min(args.page_size, length - last_first);
    }
    args.index_offset[list * args.heads_per_list + threadIdx.x] = list * args.index_stride;
    args.index_count[list * args.heads_per_list + threadIdx.x] = count;
  }
}

}  // namespace

void update_page_bounds(const PageBoundsArgs& args, cudaStream_t stream) {
  if (args.lengths) {  // one page per slot, chosen on the device
    if (args.n_slots <= 0) return;
    if (args.page_size < 1 || args.head_dim % 8 != 0)
      throw std::invalid_argument("update_page_bounds: page_size >= 1 and head_dim % 8 == 0");
    launch_overlapped(update_pages_kernel, dim3(1, args.n_slots), std::min(args.head_dim, 256), 0,
                      stream, "update_pages_kernel", args);
    return;
  }
  if (args.end <= args.begin || args.n_slots <= 0) return;
  if (args.page_size < 1) throw std::invalid_argument("update_page_bounds: page_size must be >= 1");
  if (args.head_dim % 8 != 0 || (args.end + args.page_size - 1) / args.page_size > args.max_pages)
    throw std::invalid_argument(
        "update_page_bounds: head_dim must be a multiple of 8 and the pages fit max_pages");
  const int first_page = args.begin / args.page_size, last_page = (args.end - 1) / args.page_size;
  const dim3 grid(last_page - first_page + 1, args.n_slots);
  update_pages_kernel<<<grid, std::min(args.head_dim, 256), 0, stream>>>(args);
  check(cudaGetLastError(), "update_pages_kernel launch");
}

void page_bound_scores(const PageScoreArgs& args, cudaStream_t stream) {
  if (args.n_pages <= 0 || args.batch <= 0) return;
  const int group = args.n_query_heads / args.n_kv_heads;
  if (group < 1 || group > kMaxGroup || group * args.n_kv_heads != args.n_query_heads)
    throw std::invalid_argument("page_bound_scores: needs Hq = g * Hkv with g <= 16");
  if (args.n_pages > args.max_pages)
    throw std::invalid_argument("page_bound_scores: n_pages > max_pages");
  if (args.lengths && args.page_size < 1)
    throw std::invalid_argument("page_bound_scores: page_size must be >= 1");
  const dim3 grid((args.n_pages + kScoreThreads - 1) / kScoreThreads, args.batch * args.n_kv_heads);
  const size_t smem = size_t(group) * args.head_dim * sizeof(float);
  with_constant<64, 128>(args.head_dim, "page_bound_scores: head_dim", [&](auto dim) {
    launch_page_scores<decltype(dim)::value>(args, grid, smem, stream);
  });
  check(cudaGetLastError(), "page_scores_kernel launch");
}

void expand_pages(const ExpandPagesArgs& args, cudaStream_t stream) {
  if (args.n_lists <= 0) return;
  if (args.heads_per_list > 256 || args.lists_per_slot < 1)
    throw std::invalid_argument("expand_pages: heads_per_list <= 256, lists_per_slot >= 1");
  launch_overlapped(expand_pages_kernel, args.n_lists, 256, 0, stream, "expand_pages_kernel", args);
  check(cudaGetLastError(), "expand_pages_kernel launch");
}

}  // namespace kvb::cuda
