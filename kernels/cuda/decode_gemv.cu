// The decode step's products: for n <= 4 rows (a decode batch) a bandwidth-bound GEMV kernel with
// fused epilogues (SwiGLU, argmax, the residual add) and the RMSNorms folded in (FoldedNorm); for
// 5 to 16 rows a tensor-core kernel with a plain store; cuBLAS otherwise. Declared in
// transformer_ops.h. CPU twins: kernels/cpu/matmul.h, rmsnorm.h, activations.h. Tests:
// tests/cuda/transformer_ops_test.cc.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"
#include "kernels/cuda/transformer_ops.h"

namespace kvb::cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(int(status)) + " in " +
                             what);
}

// Decode-time products (n <= 4 rows of x) are bandwidth-bound: one warp streams one weight row in
// 16-byte chunks, four chunks in flight per lane, x read through L1 (the weights bypass it), the
// first chunks before griddepcontrol.wait; cuBLAS's GEMM kernels leave a large part of the
// bandwidth unused at this shape. (Measured and dropped, results/gpu-kernel-tuning.md §1.1: a
// persistent one-wave variant with the next loads always in flight was no faster (an early-load
// variant then used __ldg, which nvcc sank below the wait); an RMSNorm in the last block of the
// o/down GEMVs was slower than its own kernel, the blocks' atomic count serialising; normalising
// the f32 residual inside the qkv and gate/up GEMVs, each warp reading its slice of the row, cost
// those GEMVs more than the norm kernel (the norms are folded instead: see FoldedNorm); twice the
// warps per row for the down product (8 instead of 4) made it faster alone but the whole step
// slower, and twice the blocks for every product (kTargetBlocks 4096) slowed qkv and o; with the
// L2::256B fetch hint on the weights, no gain.)

// What a GEMV does with its dot products. kStore: y = x·wᵀ. kSwiGLU: the weight holds gate rows
// then up rows (2·items rows); a warp streams gate row j and up row j together and writes
// silu(gate)·up, each rounded to bf16 exactly as matmul then swiglu would. kArgmax: f32 y, and
// the maxima as (value, row) keys folded into best[r] by 64-bit atomicMax (order-independent, so
// deterministic); argmax_finish_kernel turns best into token ids. kAddToResidual: the f32
// residual stream y += the product rounded to bf16 (bit for bit matmul into a delta, then
// add_rmsnorm's add), and the next RMSNorm folded in: scaled = bf16(y · next_gain) and
// sum_sq[r] += Σ y² over the block's outputs (see FoldedNorm in transformer_ops.h).
enum class GemvEpilogue { kStore, kSwiGLU, kArgmax, kAddToResidual };

template <typename Out>
struct GemvParams {
  const __nv_bfloat16* x = nullptr;
  const __nv_bfloat16* w = nullptr;
  Out* y = nullptr;
  int in_features = 0;
  int items = 0;  // output columns of y (rows of w, or gate/up row pairs for kSwiGLU)
  int splits = 1;
  unsigned long long* best = nullptr;  // kArgmax: [n] packed (value, row) maxima
  // kFolded (the product after a folded norm): x holds bf16(v · gain), and the sums are scaled by
  // 1/sqrt(norm_sum_sq[r] / in_features + eps); block 0 zeroes reset_sum_sq for the next producer.
  const double* norm_sum_sq = nullptr;
  double* reset_sum_sq = nullptr;
  float norm_eps = 0.f;
  // kAddToResidual: the next norm's gain, and where its folded input and Σv² go.
  const __nv_bfloat16* next_gain = nullptr;
  __nv_bfloat16* scaled = nullptr;
  double* sum_sq = nullptr;
};

// Orders floats as unsigned integers (larger float -> larger key); the low word holds ~row so
// that among equal values the lowest row wins.
__device__ __forceinline__ unsigned long long argmax_key(float value, int row) {
  const unsigned int bits = __float_as_uint(value);
  const unsigned int ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) |
         (0xFFFFFFFFu - static_cast<unsigned int>(row));
}

__device__ __forceinline__ float dot8(const int4& w, const float (&x)[8], float acc) {
  float wf[8];
  to_float8(w, wf);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    acc = fmaf(wf[2 * i], x[2 * i], fmaf(wf[2 * i + 1], x[2 * i + 1], acc));
  return acc;
}

// Weights are read once per step: their loads take no L1 line, so x, which every warp of a block
// reads, stays in L1 (faster than __ldg: results/gpu-kernel-tuning.md §1.2). asm volatile keeps
// each load where it is written: before the wait for the first round.
__device__ __forceinline__ int4 load_streamed(const int4* address) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(address));
  return v;
}

// What a kAddToResidual writer fetched ahead of the epilogue, so the epilogue waits on no load.
struct ResidualPrefetch {
  float old_value = 0.f;
  float next_gain = 0.f;
};

// Writes one output of a GEMV (lane r < N holds row r's sums); for kArgmax folds it into the
// lane's running key; for kAddToResidual returns the new residual value's square.
template <int N, int R, typename Out, GemvEpilogue E>
__device__ __forceinline__ float gemv_write(const GemvParams<Out>& p, int item, int lane,
                                            const float* sums, const ResidualPrefetch& prefetched,
                                            unsigned long long& key) {
  const int64_t out_index = int64_t(lane) * p.items + item;
  if constexpr (E == GemvEpilogue::kSwiGLU) {
    const float g = __bfloat162float(__float2bfloat16(sums[0]));
    const float u = __bfloat162float(__float2bfloat16(sums[R - 1]));
    p.y[out_index] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
  } else if constexpr (E == GemvEpilogue::kAddToResidual) {
    const float value = prefetched.old_value + __bfloat162float(__float2bfloat16(sums[0]));
    p.y[out_index] = value;
    p.scaled[out_index] = __float2bfloat16(value * prefetched.next_gain);
    return value * value;
  } else if constexpr (std::is_same_v<Out, float>) {
    p.y[out_index] = sums[0];
    if constexpr (E == GemvEpilogue::kArgmax) key = max(key, argmax_key(sums[0], item));
  } else {
    p.y[out_index] = __float2bfloat16(sums[0]);
  }
  return 0.f;
}

// kArgmax: folds the block's keys into best. kAddToResidual: adds the block's Σv² per row into
// its line of sum_sq (FoldedNorm), in a fixed order within the block; across blocks the f64 adds
// make the total independent of their order unless it lies within ~2^-29 of a rounding boundary of
// the f32 it is used as.
template <int N, typename Out, GemvEpilogue E>
__device__ __forceinline__ void gemv_finish(const GemvParams<Out>& p, int warp, int lane,
                                            unsigned long long key, float square) {
  if constexpr (E == GemvEpilogue::kAddToResidual) {
    __shared__ float block_squares[8][N];
    if (lane < N) block_squares[warp][lane] = square;
    __syncthreads();
    if (threadIdx.x < N) {
      double total = 0.0;
      for (int w = 0; w < 8; ++w) total += block_squares[w][threadIdx.x];
      atomicAdd(p.sum_sq + folded_norm_word(blockIdx.x % kFoldedNormLines, threadIdx.x), total);
    }
  }
  if constexpr (E == GemvEpilogue::kArgmax) {
    __shared__ unsigned long long block_best[8][N];
    if (lane < N) block_best[warp][lane] = key;
    __syncthreads();
    if (threadIdx.x < N) {
      unsigned long long best = 0;
      for (int w = 0; w < 8; ++w) best = max(best, block_best[w][threadIdx.x]);
      if (best != 0) atomicMax(p.best + threadIdx.x, best);
    }
  }
}

// `splits` warps share an output (each streams a contiguous slice of its row, then the block adds
// the slices in a fixed order): a projection with few rows (4,096 outputs) still puts enough warps
// and loads in flight to stream its weights at full bandwidth.
// kFolded: x is a folded norm's bf16(v · gain); the norm's scale 1/sqrt(mean(v²) + eps) multiplies
// the sums at the end (mean(v²) from the producer's norm_sum_sq, read right after the wait).
// One row (B = 1) is held to 40 registers, 6 blocks per SM: the residual writer had taken 45 (5
// blocks), and the down product measured slower (results/gpu-kernel-tuning.md §1.3).
template <int N, typename Out, GemvEpilogue E, bool kFolded>
__global__ void __launch_bounds__(256, N == 1 ? 6 : 1) gemv_kernel(GemvParams<Out> p) {
  constexpr int R = E == GemvEpilogue::kSwiGLU ? 2 : 1;  // weight rows per warp
  constexpr int kUnroll = 4 / R;
  const int splits = p.splits;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int item = blockIdx.x * (8 / splits) + warp / splits;
  const int part = warp % splits;
  const bool active = item < p.items;
  const int in_features = p.in_features;
  const int chunks = in_features / 8;
  const int per_part = (chunks + splits - 1) / splits;
  const int begin = part * per_part, end = min(chunks, begin + per_part);
  const int4* w_row[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    w_row[r] = reinterpret_cast<const int4*>(
        p.w + (int64_t(active ? item : 0) + int64_t(r) * p.items) * in_features);
  int4 wv[R][kUnroll];
  auto load = [&](int base) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = base + u * 32;
        wv[r][u] = active && c < end ? load_streamed(w_row[r] + c) : make_int4(0, 0, 0, 0);
      }
  };
  const bool writer = active && part == 0 && lane < N;
  // Values the epilogue needs wait in shared memory, not in registers held across the loop: at 40
  // registers those spilled, and a spill's store waits on its load (a round trip before the first
  // weights' arithmetic; measured slower, results/gpu-kernel-tuning.md §1.4).
  __shared__ float old_residual[8][N], next_gain[8][N];
  __shared__ double norm_sum_sq[kFoldedNormLines][N];
  // The first round of weights leaves before the wait (weights are constant): the blocks resident
  // while the previous kernel drains stream from HBM instead of idling (measured:
  // results/gpu-kernel-tuning.md §1.5).
  const int first_base = begin + lane;
  load(first_base);
  if constexpr (E == GemvEpilogue::kAddToResidual)
    if (writer) next_gain[warp][lane] = __bfloat162float(p.next_gain[item]);  // constant
  allow_successor_launch();
  wait_for_predecessor();
  if constexpr (E == GemvEpilogue::kAddToResidual)
    if (writer) cp_async_small<4>(&old_residual[warp][lane], p.y + int64_t(lane) * p.items + item);
  // kFolded: one thread per (line, row) fetches that word of the rows' Σv² for the block (lines
  // every block of the grid reads: one load per block, or their L2 slices queue and slow the
  // weight stream).
  if constexpr (kFolded) {
    if (threadIdx.x < kFoldedNormLines * N) {
      const int line = threadIdx.x / N, row = threadIdx.x % N;
      const int word = folded_norm_word(line, row);
      cp_async_small<8>(&norm_sum_sq[line][row], p.norm_sum_sq + word);
      if (blockIdx.x == 0) p.reset_sum_sq[word] = 0.0;
    }
  }
  cp_async_commit();
  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int n = 0; n < N; ++n) acc[r][n] = 0.f;
  for (int base = first_base; active && base < end; base += 32 * kUnroll) {
    if (base != first_base) load(base);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = base + u * 32;
      if (c >= end) break;
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float xv[8];
        to_float8(__ldg(reinterpret_cast<const int4*>(p.x + int64_t(n) * in_features) + c), xv);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][n] = dot8(wv[r][u], xv, acc[r][n]);
      }
    }
  }
  __shared__ float slice_sums[8][R][N];
  __shared__ float norm_scale[N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float v = acc[r][n];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffff, v, off);
      if (lane == 0) slice_sums[warp][r][n] = v;
    }
  cp_async_wait<0>();  // this thread's copies above have landed
  if constexpr (kFolded) {
    __syncthreads();  // every line's copy
    if (threadIdx.x < N) {
      double total = 0.0;
      for (int line = 0; line < kFoldedNormLines; ++line) total += norm_sum_sq[line][threadIdx.x];
      norm_scale[threadIdx.x] = rsqrtf(float(total) / in_features + p.norm_eps);
    }
  }
  __syncthreads();
  unsigned long long key = 0;
  float square = 0.f;
  if (writer) {
    float sums[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sums[r] = 0.f;
      for (int q = 0; q < splits; ++q) sums[r] += slice_sums[warp + q][r][lane];
    }
    if constexpr (kFolded)
#pragma unroll
      for (int r = 0; r < R; ++r) sums[r] *= norm_scale[lane];
    ResidualPrefetch prefetched;
    if constexpr (E == GemvEpilogue::kAddToResidual)
      prefetched = {.old_value = old_residual[warp][lane], .next_gain = next_gain[warp][lane]};
    square = gemv_write<N, R, Out, E>(p, item, lane, sums, prefetched, key);
  }
  gemv_finish<N, Out, E>(p, warp, lane, key, square);
}

// next[r] = the row packed in best[r]; best[r] is left zero for the next step.
__global__ void argmax_finish_kernel(unsigned long long* best, int n, int32_t* next) {
  wait_for_predecessor();
  allow_successor_launch();
  if (threadIdx.x < n) {
    const unsigned long long key = best[threadIdx.x];
    next[threadIdx.x] =
        static_cast<int32_t>(0xFFFFFFFFu - static_cast<unsigned int>(key & 0xFFFFFFFFull));
    best[threadIdx.x] = 0;
  }
}

// Warps that share one output of a block's 8 (a GEMV row, a tensor-core tile), each streaming a
// contiguous slice of its `row_units` units of work: doubled while the grid has fewer than
// `target_blocks` blocks and every warp would still keep at least `min_units` units after doubling.
int warps_per_output(int outputs, int row_units, int min_units, int target_blocks) {
  int splits = 1;
  while (splits < 8 && (outputs + 8 / splits - 1) / (8 / splits) < target_blocks &&
         row_units / (2 * splits) >= min_units)
    splits *= 2;
  return splits;
}

// Warps per row: enough blocks for about two waves of the GPU, while every warp keeps at least
// one full pass of 32 lanes x 16 bytes (32 chunks of 8 weights) over its slice.
int gemv_splits(int in_features, int out_features) {
  return warps_per_output(out_features, in_features / 8, 32, 2048);
}

bool gemv_applies(int n, int in_features) {
  return n >= 1 && n <= kDecodeGemvMaxRows && in_features % 8 == 0;
}

// The SwiGLU GEMV (a gate and an up row per warp) streams best at 5 blocks per SM. The folded
// variant's registers allow 6, which measured slower (as did 4; results/gpu-kernel-tuning.md §1.6),
// so dynamic shared memory that it does not use caps it at 5.
size_t swiglu_shared_bytes() {
  constexpr int kSwigluBlocksPerSm = 5;
  static const size_t bytes = [] {
    int device = 0, per_sm = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
          "cudaDeviceGetAttribute(shared memory per SM)");
    return size_t(per_sm) / (kSwigluBlocksPerSm + 1);  // one block more no longer fits
  }();
  return bytes;
}

template <typename Out, GemvEpilogue E, bool kFolded = false>
void launch_gemv(const GemvParams<Out>& params, int n, int weight_rows, cudaStream_t stream) {
  GemvParams<Out> p = params;
  // Splits follow the weight rows streamed (a SwiGLU pair is two), so the fused gate/up product
  // sums in exactly the order of the plain one.
  p.splits = gemv_splits(p.in_features, weight_rows);
  const int items_per_block = 8 / p.splits;
  const dim3 grid((p.items + items_per_block - 1) / items_per_block);
  void (*kernel)(GemvParams<Out>) = n == 1   ? gemv_kernel<1, Out, E, kFolded>
                                    : n == 2 ? gemv_kernel<2, Out, E, kFolded>
                                    : n == 3 ? gemv_kernel<3, Out, E, kFolded>
                                             : gemv_kernel<4, Out, E, kFolded>;
  launch_overlapped(kernel, grid, 256, E == GemvEpilogue::kSwiGLU ? swiglu_shared_bytes() : 0,
                    stream, "gemv_kernel", p);
}

// Decode batches of 5 to 16 rows (a sample's cells decoded together) on the tensor cores: the
// products stay bandwidth-bound, but 16 rows of FMAs per weight on the CUDA cores would not (an 8B
// model's 8e9 weights x 16 rows is ~4 ms of f32 FMA on an H100, above the ~3.3 ms its weights take
// to stream), and cuBLAS's GEMMs leave a large part of the bandwidth unused at this shape.
// One warp computes a 16-row tile of W against every x row (mma m16n8k16, one 8-column n-tile per
// 8 x rows); `splits` warps of a block share a tile, each streaming a contiguous slice of k, and
// the block adds the slices in a fixed order. The fragments are read straight from global memory
// in 16-byte loads: lane 4g + c loads k = 8c .. 8c+7 of W rows g and g+8 and of x row g, and the
// two mmas of a 32-wide k step take those eight k as (8c, 8c+1 | 8c+2, 8c+3) and (8c+4, 8c+5 |
// 8c+6, 8c+7) in place of the fragment's (2c, 2c+1 | 2c+8, 2c+9). A and B are permuted alike, so
// every product term is still W[row, k] x[col, k] exactly once.
constexpr int kSkinnyMinRows = kDecodeGemvMaxRows + 1;
// 32-wide k steps per round (two rounds in flight, of 8 16-byte loads a lane each).
constexpr int kSkinnyUnroll = 4;

__device__ __forceinline__ uint32_t word(int value) { return static_cast<uint32_t>(value); }

template <int NT, typename Out>
__global__ void __launch_bounds__(256)
    skinny_mma_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int n,
                      int in_features, int out_features, int splits) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int tile = blockIdx.x * (8 / splits) + warp / splits;
  const int part = warp % splits;
  const int row0 = tile * 16;
  const bool active = row0 < out_features;  // the same for every lane of the warp
  const int chunks = in_features / 8;
  const int per_part = (chunks + splits - 1) / splits;
  const int begin = part * per_part, end = min(chunks, begin + per_part);
  const bool lo_valid = row0 + g < out_features, hi_valid = row0 + g + 8 < out_features;
  const int4* w_lo =
      reinterpret_cast<const int4*>(w + int64_t(lo_valid ? row0 + g : 0) * in_features);
  const int4* w_hi =
      reinterpret_cast<const int4*>(w + int64_t(hi_valid ? row0 + g + 8 : 0) * in_features);
  // Two rounds of weights in flight: the next round's loads leave before this round's mmas, and
  // each 32-wide step u adds into accumulators of its own, so the mmas of a round do not wait on
  // one another (one accumulator chain made the kernel slower than cuBLAS at 10 rows and more).
  struct Round {
    int4 lo[kSkinnyUnroll], hi[kSkinnyUnroll];
  };
  auto load = [&](Round& round, int base) {
#pragma unroll
    for (int u = 0; u < kSkinnyUnroll; ++u) {
      const int chunk = base + 4 * u + c;
      const bool in_slice = active && chunk < end;
      round.lo[u] = in_slice && lo_valid ? load_streamed(w_lo + chunk) : make_int4(0, 0, 0, 0);
      round.hi[u] = in_slice && hi_valid ? load_streamed(w_hi + chunk) : make_int4(0, 0, 0, 0);
    }
  };
  Round even, odd;
  load(even, begin);  // weights are constant: the first round leaves before the wait
  allow_successor_launch();
  wait_for_predecessor();
  const int4* x_row[NT];
  bool x_valid[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    x_valid[t] = g + 8 * t < n;
    x_row[t] = reinterpret_cast<const int4*>(x + int64_t(x_valid[t] ? g + 8 * t : 0) * in_features);
  }
  float acc[kSkinnyUnroll][NT][4] = {};
  auto multiply = [&](const Round& round, int base) {
#pragma unroll
    for (int u = 0; u < kSkinnyUnroll; ++u) {
      if (base + 4 * u >= end) break;  // the same for every lane
      const int chunk = base + 4 * u + c;
      const int4 &lo = round.lo[u], &hi = round.hi[u];
      const uint32_t first[4] = {word(lo.x), word(hi.x), word(lo.y), word(hi.y)};
      const uint32_t second[4] = {word(lo.z), word(hi.z), word(lo.w), word(hi.w)};
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int4 xv = x_valid[t] && chunk < end ? __ldg(x_row[t] + chunk) : make_int4(0, 0, 0, 0);
        mma_bf16(acc[u][t], first, word(xv.x), word(xv.y));
        mma_bf16(acc[u][t], second, word(xv.z), word(xv.w));
      }
    }
  };
  constexpr int kRound = 4 * kSkinnyUnroll;  // chunks per round
  for (int base = begin; active && base < end; base += 2 * kRound) {
    if (base + kRound < end) load(odd, base + kRound);
    multiply(even, base);
    if (base + 2 * kRound < end) load(even, base + 2 * kRound);
    if (base + kRound < end) multiply(odd, base + kRound);
  }
#pragma unroll
  for (int u = 1; u < kSkinnyUnroll; ++u)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[0][t][i] += acc[u][t][i];
  __shared__ float slices[8][NT][4][32];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) slices[warp][t][i][lane] = acc[0][t][i];
  __syncthreads();
  if (!active || part != 0) return;
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // C fragment: rows g (i < 2) and g + 8, columns 2c + (i & 1)
      const int row = row0 + g + (i < 2 ? 0 : 8), col = 8 * t + 2 * c + (i & 1);
      if (row >= out_features || col >= n) continue;
      float sum = 0.f;
      for (int q = 0; q < splits; ++q) sum += slices[warp + q][t][i][lane];
      if constexpr (std::is_same_v<Out, float>)
        y[int64_t(col) * out_features + row] = sum;
      else
        y[int64_t(col) * out_features + row] = __float2bfloat16(sum);
    }
}

// Warps per tile: enough blocks to fill the GPU about twice, while each warp keeps at least two
// rounds of loads (2 x kSkinnyUnroll 32-wide k steps) over its slice.
int skinny_splits(int in_features, int tiles) {
  return warps_per_output(tiles, in_features / 32, 2 * kSkinnyUnroll, 1024);
}

// Off unless KVB_CUDA_SKINNY_MMA=1: on an H100 the kernel's second version lost to cuBLAS at 8-16
// rows and tied at 5 (results/gpu-sweeps.md, sixth round), so cuBLAS takes 5-16 rows by default.
bool skinny_mma_enabled() {
  static const bool enabled = env_switch_set("KVB_CUDA_SKINNY_MMA");
  return enabled;
}

bool skinny_mma_applies(int n, int in_features) {
  return n >= kSkinnyMinRows && n <= kSkinnyMaxRows && in_features % 8 == 0;
}

template <typename Out>
void launch_skinny_mma(const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int n,
                       int in_features, int out_features, cudaStream_t stream) {
  const int tiles = (out_features + 15) / 16;
  const int splits = skinny_splits(in_features, tiles);
  const int tiles_per_block = 8 / splits;
  const dim3 grid((tiles + tiles_per_block - 1) / tiles_per_block);
  auto kernel = n <= 8 ? skinny_mma_kernel<1, Out> : skinny_mma_kernel<2, Out>;
  launch_overlapped(kernel, grid, 256, 0, stream, "skinny_mma_kernel", x, w, y, n, in_features,
                    out_features, splits);
}

template <typename Out>
bool try_skinny_mma(const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int n, int in_features,
                    int out_features, cudaStream_t stream) {
  if (!skinny_mma_applies(n, in_features) || !skinny_mma_enabled()) return false;
  launch_skinny_mma(x, w, y, n, in_features, out_features, stream);
  return true;
}

template <typename Out>
bool try_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int n, int in_features,
              int out_features, cudaStream_t stream) {
  if (!gemv_applies(n, in_features)) return false;
  GemvParams<Out> p{.x = x, .w = w, .y = y, .in_features = in_features, .items = out_features};
  launch_gemv<Out, GemvEpilogue::kStore>(p, n, out_features, stream);
  return true;
}

bool fused_norm_enabled() {  // KVB_CUDA_FUSED_NORM=0: norm kernels and bf16 deltas (A/B timing)
  static const bool enabled = env_switch_on("KVB_CUDA_FUSED_NORM");
  return enabled;
}

// The folded norms live only in the GEMV: a product that cannot take it is refused, not computed
// without its norm.
void require_decode_gemv(const char* what, int n, int in_features) {
  if (!gemv_applies(n, in_features))
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(n) + " rows of " +
                                std::to_string(in_features) +
                                " features do not take the decode GEMV (check norms_fold first)");
}

// The product after a folded norm: a GEMV over its scaled rows.
template <typename Out, GemvEpilogue E>
void launch_folded(GemvParams<Out> p, const FoldedNorm& x, int n, int weight_rows,
                   cudaStream_t stream) {
  require_decode_gemv("folded RMSNorm", n, p.in_features);
  p.x = x.scaled;
  p.norm_sum_sq = x.sum_sq;
  p.reset_sum_sq = x.other_sum_sq;
  p.norm_eps = x.eps;
  launch_gemv<Out, E, true>(p, n, weight_rows, stream);
}

// y = x · wᵀ: the GEMV for decode rows, cuBLAS otherwise (bf16 or f32 y).
template <typename Out>
void product(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int n,
             int in_features, int out_features, cudaStream_t stream) {
  if (try_gemv(x, w, y, n, in_features, out_features, stream)) return;
  if (try_skinny_mma(x, w, y, n, in_features, out_features, stream)) return;
  constexpr bool kF32 = std::is_same_v<Out, float>;
  const float one = 1.f, zero = 0.f;
  check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
  // Column-major view: Y^T[out, n] = W^T' [out, in] * X^T [in, n].
  check_cublas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, out_features, n, in_features, &one, w,
                            CUDA_R_16BF, in_features, x, CUDA_R_16BF, in_features, &zero, y,
                            kF32 ? CUDA_R_32F : CUDA_R_16BF, out_features, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               kF32 ? "cublasGemmEx(bf16->f32)" : "cublasGemmEx(bf16)");
}

}  // namespace

void matmul(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
            int n, int in_features, int out_features, cudaStream_t stream) {
  product(handle, x, w, y, n, in_features, out_features, stream);
}

void matmul_f32out(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y,
                   int n, int in_features, int out_features, cudaStream_t stream) {
  product(handle, x, w, y, n, in_features, out_features, stream);
}

void matmul_skinny_mma(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int n,
                       int in_features, int out_features, cudaStream_t stream) {
  if (!skinny_mma_applies(n, in_features))
    throw std::invalid_argument("matmul_skinny_mma: " + std::to_string(n) + " rows of " +
                                std::to_string(in_features) + " features (needs " +
                                std::to_string(kSkinnyMinRows) + "-" +
                                std::to_string(kSkinnyMaxRows) + " rows, features % 8 == 0)");
  launch_skinny_mma(x, w, y, n, in_features, out_features, stream);
}

void gate_up_swiglu(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w_gate_up,
                    __nv_bfloat16* gate_up, __nv_bfloat16* out, int n, int in_features, int ffn,
                    cudaStream_t stream) {
  if (n == 0) return;
  if (!gemv_applies(n, in_features)) {
    matmul(handle, x, w_gate_up, gate_up, n, in_features, 2 * ffn, stream);
    swiglu(gate_up, n, ffn, out, stream);
    return;
  }
  GemvParams<__nv_bfloat16> p{
      .x = x, .w = w_gate_up, .y = out, .in_features = in_features, .items = ffn};
  launch_gemv<__nv_bfloat16, GemvEpilogue::kSwiGLU>(p, n, 2 * ffn, stream);
}

void lm_head_argmax(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                    float* logits, int n, int in_features, int vocab, unsigned long long* best,
                    int32_t* next, cudaStream_t stream) {
  if (n == 0) return;
  if (!gemv_applies(n, in_features)) {
    matmul_f32out(handle, x, w, logits, n, in_features, vocab, stream);
    argmax_rows(logits, n, vocab, next, stream);
    return;
  }
  GemvParams<float> p{
      .x = x, .w = w, .y = logits, .in_features = in_features, .items = vocab, .best = best};
  launch_gemv<float, GemvEpilogue::kArgmax>(p, n, vocab, stream);
  launch_overlapped(argmax_finish_kernel, 1, 32, 0, stream, "argmax_finish_kernel", best, n, next);
}

bool norms_fold(int n, std::initializer_list<int> in_features) {
  if (!fused_norm_enabled()) return false;
  for (int features : in_features)
    if (!gemv_applies(n, features)) return false;
  return true;
}

void matmul(const FoldedNorm& x, const __nv_bfloat16* w, __nv_bfloat16* y, int n, int in_features,
            int out_features, cudaStream_t stream) {
  if (n == 0) return;
  GemvParams<__nv_bfloat16> p{.w = w, .y = y, .in_features = in_features, .items = out_features};
  launch_folded<__nv_bfloat16, GemvEpilogue::kStore>(p, x, n, out_features, stream);
}

void gate_up_swiglu(const FoldedNorm& x, const __nv_bfloat16* w_gate_up, __nv_bfloat16* out, int n,
                    int in_features, int ffn, cudaStream_t stream) {
  if (n == 0) return;
  GemvParams<__nv_bfloat16> p{.w = w_gate_up, .y = out, .in_features = in_features, .items = ffn};
  launch_folded<__nv_bfloat16, GemvEpilogue::kSwiGLU>(p, x, n, 2 * ffn, stream);
}

void lm_head_argmax(const FoldedNorm& x, const __nv_bfloat16* w, float* logits, int n,
                    int in_features, int vocab, unsigned long long* best, int32_t* next,
                    cudaStream_t stream) {
  if (n == 0) return;
  GemvParams<float> p{
      .w = w, .y = logits, .in_features = in_features, .items = vocab, .best = best};
  launch_folded<float, GemvEpilogue::kArgmax>(p, x, n, vocab, stream);
  launch_overlapped(argmax_finish_kernel, 1, 32, 0, stream, "argmax_finish_kernel", best, n, next);
}

void matmul_into_residual(const __nv_bfloat16* x, const __nv_bfloat16* w, float* residual, int n,
                          int in_features, int out_features, const FoldedNorm& next,
                          cudaStream_t stream) {
  if (n == 0) return;
  require_decode_gemv("matmul_into_residual", n, in_features);
  GemvParams<float> p{.x = x,
                      .w = w,
                      .y = residual,
                      .in_features = in_features,
                      .items = out_features,
                      .next_gain = next.gain,
                      .scaled = next.scaled,
                      .sum_sq = next.sum_sq};
  launch_gemv<float, GemvEpilogue::kAddToResidual>(p, n, out_features, stream);
}

}  // namespace kvb::cuda
