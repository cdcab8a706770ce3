// H2O's attention column sums from the rows' LSE, on the tensor cores. Contract and CPU twin:
// kernels/cuda/attention_column_sums.h.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_column_sums.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"

namespace kvb::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kQueryTile = 64;
constexpr float kLog2e = 1.4426950408889634f;

// m16 tiles of keys per warp, held in registers as the A operand: 4, 2, 1 at head_dim 64, 128,
// 256, as many as fit the register file. Each warp reads the whole query tile from shared memory
// per pass, so keys per warp set the shared-memory traffic per logit.
template <int D>
constexpr int kWarpTiles = D <= 64 ? 4 : (D <= 128 ? 2 : 1);
template <int D>
constexpr int kTileKeys = kWarps * 16 * kWarpTiles<D>;

template <int D>
constexpr size_t shared_bytes() {
  return size_t(kTileKeys<D> + 2 * kQueryTile) * D * sizeof(__nv_bfloat16);
}

// 2^x on the special-function unit alone; results below 2^-126 flush to zero (terms a sum of
// probabilities does not miss).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Adds p = 2^(s · scale_log2 − lse · log2 e) of a 32-query slice of S^T (rows: the warp's keys,
// columns: queries first_column ..) to the thread's key sums. kMasked drops columns past the
// chunk's queries and keys their query does not see: warp key x is seen by column c when
// key_from_first + x <= c (key_from_first = the warp's first key − the tile's first query's
// position).
template <int M, bool kMasked>
__device__ __forceinline__ void add_probabilities(const float (&s)[M][4][4], float (&sum)[M][2],
                                                  const float* lse, int first_column, int n_columns,
                                                  int key_from_first, float scale_log2) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int column = first_column + nt * 8 + 2 * t + c;
      const float lse2 = lse[column] * kLog2e;
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float p = fast_exp2(s[m][nt][2 * r + c] * scale_log2 - lse2);
          if (!kMasked) {
            sum[m][r] += p;
          } else if (column < n_columns && key_from_first + m * 16 + g + 8 * r <= column) {
            sum[m][r] += p;
          }
        }
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads) column_sums_kernel(ColumnSumsArgs a, float scale_log2) {
  constexpr int M = kWarpTiles<D>, kKeys = kTileKeys<D>, kWarpKeys = 16 * M;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_k = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* s_q = s_k + kKeys * D;  // two query tiles: one computed, one in flight
  __shared__ float s_lse[2][kQueryTile];

  const int head = blockIdx.y;
  const int kv_head = head / (a.n_query_heads / a.n_kv_heads);
  const int key0 = blockIdx.x * kKeys;
  const int n_keys = a.query_offset + a.n_queries;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warp_key0 = key0 + warp * kWarpKeys;
  const float* lse = a.lse + int64_t(head) * a.n_queries;

  auto load_queries = [&](int buffer, int i0) {
    const int rows = min(kQueryTile, a.n_queries - i0);
    load_tile<D>(s_q + buffer * kQueryTile * D, a.q + int64_t(i0) * a.q_row_stride + head * D,
                 a.q_row_stride, kQueryTile, rows);
    for (int r = threadIdx.x; r < kQueryTile; r += kThreads)
      cp_async_small<4>(&s_lse[buffer][r], lse + i0 + (r < rows ? r : 0), r < rows);
    cp_async_commit();
  };

  // Query i sees key0 from i = key0 - query_offset on: earlier query tiles add nothing here.
  const int first_query = max(0, key0 - a.query_offset);
  load_tile<D>(s_k, a.k + int64_t(kv_head) * a.kv_head_stride + int64_t(key0) * D, D, kKeys,
               min(kKeys, n_keys - key0));
  load_queries(0, first_query);
  cp_async_wait<0>();
  __syncthreads();
  uint32_t ka[M][D / 16][4];  // this warp's keys, the A operand of every product
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      ldmatrix_x4(ka[m][ks], s_k + swizzled<D>(warp * kWarpKeys + m * 16 + lane % 16,
                                               ks * 16 + (lane / 16) * 8));

  float sum[M][2] = {};  // keys warp_key0 + 16 m + g and + 8
  int buffer = 0;
  for (int i0 = first_query; i0 < a.n_queries; i0 += kQueryTile, buffer ^= 1) {
    if (i0 + kQueryTile < a.n_queries) {
      load_queries(buffer ^ 1, i0 + kQueryTile);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int n_columns = min(kQueryTile, a.n_queries - i0);
    // Key warp_key0 + x is seen by column (query i0 + column) when x <= column - key_from_first.
    const int key_from_first = warp_key0 - (a.query_offset + i0);
    const bool all_seen = key_from_first + kWarpKeys - 1 <= 0 && n_columns == kQueryTile;
    if (key_from_first <= n_columns - 1) {  // some key of the warp is seen in this tile
      const __nv_bfloat16* tile = s_q + buffer * kQueryTile * D;
      const int j8 = lane / 8;
#pragma unroll
      for (int half = 0; half < kQueryTile / 32; ++half) {
        // S^T = K Q^T for 32 queries: rows are the warp's keys.
        float s[M][4][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            uint32_t qb[4];
            ldmatrix_x4(qb, tile + swizzled<D>(half * 32 + np * 16 + (j8 / 2) * 8 + lane % 8,
                                               ks * 16 + (j8 % 2) * 8));
#pragma unroll
            for (int m = 0; m < M; ++m) {
              mma_bf16(s[m][2 * np], ka[m][ks], qb[0], qb[1]);
              mma_bf16(s[m][2 * np + 1], ka[m][ks], qb[2], qb[3]);
            }
          }
        if (all_seen)
          add_probabilities<M, false>(s, sum, s_lse[buffer], half * 32, n_columns, key_from_first,
                                      scale_log2);
        else
          add_probabilities<M, true>(s, sum, s_lse[buffer], half * 32, n_columns, key_from_first,
                                     scale_log2);
      }
    }
    __syncthreads();  // before the next iteration's copy overwrites this buffer
  }
  // Columns 2t, 2t+1 of every n-tile went to the four lanes of the quad: add them up.
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float total = quad_sum(sum[m][r]);
      const int key = warp_key0 + m * 16 + g + 8 * r;
      if (t == 0 && key < n_keys) a.column_sums[int64_t(head) * a.sums_head_stride + key] += total;
    }
}

template <int D>
void launch(const ColumnSumsArgs& args, float scale, cudaStream_t stream) {
  allow_dynamic_shared_memory(column_sums_kernel<D>, shared_bytes<D>(), "column_sums_kernel");
  const int n_keys = args.query_offset + args.n_queries;
  const dim3 grid((n_keys + kTileKeys<D> - 1) / kTileKeys<D>, args.n_query_heads);
  column_sums_kernel<D><<<grid, kThreads, shared_bytes<D>(), stream>>>(args, scale * kLog2e);
  check(cudaGetLastError(), "column_sums_kernel");
}

}  // namespace

void attention_column_sums(const ColumnSumsArgs& args, cudaStream_t stream) {
  if (args.n_queries <= 0) return;
  if (args.n_kv_heads <= 0 || args.n_query_heads % args.n_kv_heads != 0)
    throw std::invalid_argument("attention_column_sums: " + std::to_string(args.n_query_heads) +
                                " query heads are not a multiple of " +
                                std::to_string(args.n_kv_heads) + " KV heads");
  if (!aligned_to(16, args.q, args.k) || args.q_row_stride % 8 != 0 || args.kv_head_stride % 8 != 0)
    throw std::invalid_argument(
        "attention_column_sums: q and k must be 16-byte aligned and q_row_stride (" +
        std::to_string(args.q_row_stride) + ") and kv_head_stride (" +
        std::to_string(args.kv_head_stride) + ") multiples of 8 elements");
  const float scale = args.scale != 0 ? args.scale : 1.0f / std::sqrt(float(args.head_dim));
  with_constant<64, 128, 256>(args.head_dim, "attention_column_sums: head_dim",
                              [&](auto dim) { launch<decltype(dim)::value>(args, scale, stream); });
}

}  // namespace kvb::cuda
