// The window attention sums with the reference's casts, on the CUDA cores. Contract and structure:
// kernels/cuda/window_attention_sums.h; CPU twin: kernels/cpu/window_attention_sums.h.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/window_attention_sums.h"

namespace kvb::cuda {
namespace {

using bf16 = __nv_bfloat16;
using bf16x2 = __nv_bfloat162;

constexpr int kChunk = 64;  // keys per block, one per thread
constexpr int kWarp = 32;   // keys per partial (max, Σ exp) of kernel 1

struct Shape {
  int w;          // window rows that count: min(window, L)
  int first_row;  // the first of them among the rows given
  int group;
  int n_slices;  // 32-key slices of the prompt
  float root;    // sqrt(head_dim) in fp32
};

// The chunk's keys in shared memory, dimension pairs outermost so that the threads (one key each)
// read consecutive words; the row's padding word keeps the transposing writes off one bank.
template <int D>
struct ChunkKeys {
  bf16x2 pairs[D / 2][kChunk + 1];
};

template <int D>
__device__ void load_chunk_keys(ChunkKeys<D>& s, const WindowAttentionSumsArgs& a, int kv_head,
                                int chunk_begin) {
  const bf16x2* keys =
      reinterpret_cast<const bf16x2*>(a.keys + int64_t(kv_head) * a.kv_head_stride);
  for (int e = threadIdx.x; e < kChunk * (D / 2); e += kChunk) {
    const int j = e / (D / 2), pair = e % (D / 2);
    const int key = chunk_begin + j;
    s.pairs[pair][j] =
        key < a.length ? keys[int64_t(key) * (D / 2) + pair] : __floats2bfloat162_rn(0.f, 0.f);
  }
}

// Window row t of query head `head`.
__device__ __forceinline__ const bf16x2* query_row(const WindowAttentionSumsArgs& a,
                                                   const Shape& shape, int head, int t) {
  return reinterpret_cast<const bf16x2*>(a.queries +
                                         int64_t(shape.first_row + t) * a.query_row_stride +
                                         int64_t(head) * a.query_head_stride);
}

// x_tj of the header: q · k as one fp32 FMA chain in dimension order, then the casts.
template <int D>
__device__ __forceinline__ float logit(const bf16x2* q, const ChunkKeys<D>& s, int key_in_chunk,
                                       bool casts, float root) {
  float dot = 0.f;
#pragma unroll 8
  for (int pair = 0; pair < D / 2; ++pair) {
    const float2 qf = __bfloat1622float2(q[pair]);
    const float2 kf = __bfloat1622float2(s.pairs[pair][key_in_chunk]);
    dot = fmaf(qf.x, kf.x, dot);
    dot = fmaf(qf.y, kf.y, dot);
  }
  return casts ? round_to_bf16(round_to_bf16(dot) / root) : dot / root;
}

// (m, s) ⊕ (m2, s2) of two softmax partials: s the sum of exp(x − m); m = −inf for none.
__device__ __forceinline__ void merge_partial(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
  } else if (m2 > m) {
    s = s * expf(m - m2) + s2;
    m = m2;
  } else {
    s += s2 * expf(m2 - m);
  }
}

// Kernel 1: per window row of the KV head's group, the partial (max, Σ exp(x − max)) of each warp's
// 32 keys, at partials[row][slice] with row = a * w + t.
template <int D>
__global__ void __launch_bounds__(kChunk)
    row_partials_kernel(WindowAttentionSumsArgs a, Shape shape, float2* partials) {
  __shared__ ChunkKeys<D> s;
  const int kv_head = blockIdx.y, chunk_begin = blockIdx.x * kChunk;
  const int key = chunk_begin + threadIdx.x, slice = key / kWarp, lane = threadIdx.x % kWarp;
  load_chunk_keys<D>(s, a, kv_head, chunk_begin);
  __syncthreads();
  const bool casts = a.reference_bf16_casts;
  const int prefix = a.length - shape.w;  // row t sees keys j <= prefix + t
  for (int head = kv_head * shape.group; head < (kv_head + 1) * shape.group; ++head)
    for (int t = 0; t < shape.w; ++t) {
      const bool visible = key < a.length && key <= prefix + t;
      const float x =
          visible ? logit<D>(query_row(a, shape, head, t), s, threadIdx.x, casts, shape.root)
                  : -INFINITY;
      float m = x;
      for (int offset = kWarp / 2; offset > 0; offset /= 2)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      float e = visible ? expf(x - m) : 0.f;
      for (int offset = kWarp / 2; offset > 0; offset /= 2)
        e += __shfl_xor_sync(0xffffffffu, e, offset);
      if (lane == 0 && slice < shape.n_slices)
        partials[(int64_t(head) * shape.w + t) * shape.n_slices + slice] = make_float2(m, e);
    }
}

// Kernel 2: one warp per window row merges the partials of the slices the row sees into
// (m_t, s_t), in a fixed order.
__global__ void __launch_bounds__(kWarp)
    row_statistics_kernel(int length, Shape shape, const float2* partials, float2* rows) {
  const int row = blockIdx.x, t = row % shape.w;
  const int slices_seen = (length - shape.w + t) / kWarp + 1;
  float m = -INFINITY, s = 0.f;
  for (int slice = threadIdx.x; slice < slices_seen; slice += kWarp) {
    const float2 partial = partials[int64_t(row) * shape.n_slices + slice];
    merge_partial(m, s, partial.x, partial.y);
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    merge_partial(m, s, m2, s2);
  }
  if (threadIdx.x == 0) rows[row] = make_float2(m, s);
}

// Kernel 3: each thread owns one key's sums over the window rows that see it.
template <int D>
__global__ void __launch_bounds__(kChunk)
    column_sums_kernel(WindowAttentionSumsArgs a, Shape shape, const float2* rows) {
  __shared__ ChunkKeys<D> s;
  const int kv_head = blockIdx.y, chunk_begin = blockIdx.x * kChunk;
  const int key = chunk_begin + threadIdx.x;
  load_chunk_keys<D>(s, a, kv_head, chunk_begin);
  __syncthreads();
  if (key >= a.length) return;
  const bool casts = a.reference_bf16_casts;
  const int first_seeing = max(0, key - (a.length - shape.w));  // row t sees keys <= L − w + t
  for (int head = kv_head * shape.group; head < (kv_head + 1) * shape.group; ++head) {
    float total = 0.f;
    for (int t = first_seeing; t < shape.w; ++t) {
      const float x = logit<D>(query_row(a, shape, head, t), s, threadIdx.x, casts, shape.root);
      const float2 row = rows[int64_t(head) * shape.w + t];
      const float p = expf(x - row.x) / row.y;
      total += casts ? round_to_bf16(p) : p;
    }
    a.sums[int64_t(head) * a.sums_head_stride + key] = total;
  }
}

struct Workspace {
  float2* partials;  // [Hq * w, n_slices]
  float2* rows;      // [Hq * w]
};

Workspace split_workspace(void* base, int n_query_heads, int w, int n_slices) {
  float2* partials = static_cast<float2*>(base);
  return {partials, partials + int64_t(n_query_heads) * w * n_slices};
}

template <int D>
void launch(const WindowAttentionSumsArgs& a, const Shape& shape, cudaStream_t stream) {
  const dim3 grid((a.length + kChunk - 1) / kChunk, a.n_kv_heads);
  const Workspace ws = split_workspace(a.workspace, a.n_query_heads, shape.w, shape.n_slices);
  if (shape.w > 0) {
    row_partials_kernel<D><<<grid, kChunk, 0, stream>>>(a, shape, ws.partials);
    check(cudaGetLastError(), "window_attention_sums row_partials_kernel");
    row_statistics_kernel<<<a.n_query_heads * shape.w, kWarp, 0, stream>>>(a.length, shape,
                                                                           ws.partials, ws.rows);
    check(cudaGetLastError(), "window_attention_sums row_statistics_kernel");
  }
  column_sums_kernel<D><<<grid, kChunk, 0, stream>>>(a, shape, ws.rows);
  check(cudaGetLastError(), "window_attention_sums column_sums_kernel");
}

int slices_of(int length) { return (length + kWarp - 1) / kWarp; }

}  // namespace

size_t window_attention_sums_workspace_bytes(int n_query_heads, int length, int window) {
  const int64_t rows = int64_t(n_query_heads) * std::clamp(window, 0, std::max(length, 0));
  return size_t(rows * (slices_of(length) + 1)) * sizeof(float2);
}

void window_attention_sums(const WindowAttentionSumsArgs& args, cudaStream_t stream) {
  if (args.n_kv_heads <= 0 || args.n_query_heads % args.n_kv_heads != 0)
    throw std::invalid_argument("window_attention_sums: " + std::to_string(args.n_query_heads) +
                                " query heads are not a multiple of " +
                                std::to_string(args.n_kv_heads) + " KV heads");
  if (args.length <= 0) return;
  if (!aligned_to(4, args.queries, args.keys) || args.query_row_stride % 2 != 0 ||
      args.query_head_stride % 2 != 0 || args.kv_head_stride % 2 != 0)
    throw std::invalid_argument(
        "window_attention_sums: queries and keys must be 4-byte aligned and their strides even");
  if (args.kv_head_stride < int64_t(args.length) * args.head_dim ||
      args.sums_head_stride < args.length)
    throw std::invalid_argument("window_attention_sums: strides too short for " +
                                std::to_string(args.length) + " keys of " +
                                std::to_string(args.head_dim) +
                                " (kv_head_stride >= L*d, sums_head_stride >= L)");
  Shape shape;
  shape.w = std::clamp(args.window, 0, args.length);
  shape.first_row = args.window - shape.w;
  shape.group = args.n_query_heads / args.n_kv_heads;
  shape.n_slices = slices_of(args.length);
  shape.root = std::sqrt(float(args.head_dim));
  if (shape.w > 0 && !args.workspace)
    throw std::invalid_argument("window_attention_sums: no workspace");
  with_constant<64, 128, 256>(args.head_dim, "window_attention_sums: head_dim",
                              [&](auto dim) { launch<decltype(dim)::value>(args, shape, stream); });
}

}  // namespace kvb::cuda
