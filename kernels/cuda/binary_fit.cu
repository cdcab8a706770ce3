// BinaryPC's projection fit (Algorithm 1) on the device: contract in kernels/cuda/binary_hash.h,
// CPU twin kernels/cpu/binary_hash.cc (binary_fit_projection), whose order of every sum the
// kernels below keep, so that both engines hash with the same rows.
//
// Per bit: each iteration is one pass over the residual R [length, d] of every slot (a block per
// kBinaryFitChunk keys: eight threads per key take u = sign(r . v), then a thread per dimension
// sums u r over the block's keys) and a reduction over the blocks (v = R^T u); the first pass of a
// bit also applies the previous bit's update R <- R - u P^T, so each iteration reads R once.
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"

namespace kvb::cuda {
namespace {

constexpr int kFitThreads = kBinaryFitChunk;  // a block per chunk of keys

struct FitWorkspace {
  float* residual;  // [n_slots, length, d]
  int8_t* signs;    // [n_slots, length]
  double* partial;  // [n_slots, chunks, d]
  float* vector;    // [n_slots, d]
};

int chunks_of(int length) { return (length + kBinaryFitChunk - 1) / kBinaryFitChunk; }

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

FitWorkspace carve(void* base, int n_slots, int length, int d) {
  char* p = static_cast<char*>(base);
  FitWorkspace w;
  w.residual = reinterpret_cast<float*>(p);
  p += aligned(size_t(n_slots) * length * d * 4);
  w.signs = reinterpret_cast<int8_t*>(p);
  p += aligned(size_t(n_slots) * length);
  w.partial = reinterpret_cast<double*>(p);
  p += aligned(size_t(n_slots) * chunks_of(length) * d * 8);
  w.vector = reinterpret_cast<float*>(p);
  return w;
}

__global__ void init_residual_kernel(const __nv_bfloat16* const* keys, int64_t per_slot,
                                     float* residual) {
  const int slot = blockIdx.y;
  const __nv_bfloat16* key = keys[slot];
  float* out = residual + slot * per_slot;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < per_slot;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(key[i]);
}

// One pass of a bit over a block's kBinaryFitChunk keys, kFitTileKeys keys at a time: the tile's
// rows come through registers and shared memory in coalesced float4s (losing, with `update`,
// signs[i] * previous, and written back); eight threads per key take binary_fit_dot's eight lanes
// and add them with shuffles in its tree order (f64 addition commutes, so either thread of a pair
// holds the same bits); then a thread per dimension adds u r over the tile's keys in key order,
// carrying its sum from tile to tile. `vec`: slot s's vector at vec + s * vec_stride; with
// `accumulate`, the block's sum goes to partial.
constexpr int kFitLanes = 8;                           // binary_fit_dot's running sums
constexpr int kFitTileKeys = kFitThreads / kFitLanes;  // keys in shared memory at a time
static_assert(kBinaryFitChunk % kFitTileKeys == 0, "a chunk is whole tiles");

template <int D>
__global__ void __launch_bounds__(kFitThreads)
    fit_pass_kernel(FitWorkspace w, int length, const float* vec, int64_t vec_stride,
                    const float* previous, bool update, bool accumulate) {
  static_assert(D <= kFitThreads && D % 4 == 0, "a thread per dimension; float4 rows");
  constexpr int kStride = D + kFitLanes;  // the lanes of a warp's four keys in distinct banks
  __shared__ __align__(16) float tile[kFitTileKeys * kStride];
  __shared__ double s_vec[D];  // converted once per block
  __shared__ float s_previous[D];
  __shared__ float s_sign[kFitTileKeys];
  const int slot = blockIdx.y, chunk = blockIdx.x;
  for (int j = threadIdx.x; j < D; j += kFitThreads) {
    s_vec[j] = static_cast<double>(vec[slot * vec_stride + j]);
    if (update) s_previous[j] = previous[int64_t(slot) * kSignCodeBits * D + j];
  }
  const int chunk_first = chunk * kBinaryFitChunk;
  const int chunk_count = min(kBinaryFitChunk, length - chunk_first);
  float* chunk_rows = w.residual + (int64_t(slot) * length + chunk_first) * D;
  int8_t* chunk_signs = w.signs + int64_t(slot) * length + chunk_first;
  const int key = threadIdx.x / kFitLanes, lane = threadIdx.x % kFitLanes;
  double column_sum = 0;  // key order, as the CPU twin's block sum (u * r is exact)
  __syncthreads();
  // Each thread's float4s of a tile (and their rows' signs from the previous bit), fetched into
  // registers one tile ahead so that the loads overlap the current tile's sums.
  constexpr int kLoads = kFitTileKeys * (D / 4) / kFitThreads;
  static_assert(kLoads * kFitThreads == kFitTileKeys * (D / 4), "whole float4s per thread");
  const int column = (threadIdx.x % (D / 4)) * 4;
  auto row_of = [](int n) { return (threadIdx.x + n * kFitThreads) / (D / 4); };
  float4 staged[kLoads];
  int8_t staged_sign[kLoads];
  auto fetch = [&](int first) {
    const int count = min(kFitTileKeys, chunk_count - first);
#pragma unroll
    for (int n = 0; n < kLoads; ++n) {
      const int row = row_of(n);
      if (row >= count) continue;
      staged[n] = *reinterpret_cast<const float4*>(chunk_rows + int64_t(first + row) * D + column);
      staged_sign[n] = update ? chunk_signs[first + row] : 0;
    }
  };
  fetch(0);
  for (int first = 0; first < chunk_count; first += kFitTileKeys) {
    const int count = min(kFitTileKeys, chunk_count - first);
    int8_t* signs = chunk_signs + first;
#pragma unroll
    for (int n = 0; n < kLoads; ++n) {
      const int row = row_of(n);
      if (row >= count) continue;
      float4 x = staged[n];
      if (staged_sign[n] != 0) {
        const float u = staged_sign[n];
        x.x = x.x - u * s_previous[column];
        x.y = x.y - u * s_previous[column + 1];
        x.z = x.z - u * s_previous[column + 2];
        x.w = x.w - u * s_previous[column + 3];
        *reinterpret_cast<float4*>(chunk_rows + int64_t(first + row) * D + column) = x;
      }
      *reinterpret_cast<float4*>(tile + row * kStride + column) = x;
    }
    __syncthreads();
    if (first + kFitTileKeys < chunk_count) fetch(first + kFitTileKeys);
    double s = 0;
    if (key < count) {
      const float* row = tile + key * kStride;
#pragma unroll
      for (int j = lane; j < D; j += kFitLanes) s += static_cast<double>(row[j]) * s_vec[j];
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);  // (s0 + s1), (s2 + s3), ...
    s += __shfl_xor_sync(0xffffffffu, s, 2);  // ((s0 + s1) + (s2 + s3)), ...
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if (key < count && lane == 0) {
      const int8_t sign = s > 0 ? 1 : (s < 0 ? -1 : 0);
      signs[key] = sign;
      s_sign[key] = sign;
    }
    __syncthreads();
    if (accumulate && threadIdx.x < D) {
      for (int t = 0; t < count; ++t)  // u r is exact in f32: one conversion instead of two
        column_sum += static_cast<double>(s_sign[t] * tile[t * kStride + threadIdx.x]);
    }
    __syncthreads();  // the next tile overwrites this one
  }
  if (accumulate && threadIdx.x < D)
    w.partial[(int64_t(slot) * gridDim.x + chunk) * D + threadIdx.x] = column_sum;
}

// v = the blocks' sums in block order, rounded to f32; with `row`, also P[bit] = v / length.
__global__ void fit_reduce_kernel(FitWorkspace w, int chunks, int d, int length, float* row) {
  const int slot = blockIdx.x;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    double total = 0;
#pragma unroll 8
    for (int c = 0; c < chunks; ++c) total += w.partial[(int64_t(slot) * chunks + c) * d + j];
    const float v = static_cast<float>(total);
    w.vector[slot * d + j] = v;
    if (row) row[int64_t(slot) * kSignCodeBits * d + j] = v / static_cast<float>(length);
  }
}

// P[bit] = start / length (no iterations).
__global__ void fit_scale_kernel(const float* start, int d, int length, float* row) {
  const int slot = blockIdx.x;
  for (int j = threadIdx.x; j < d; j += blockDim.x)
    row[int64_t(slot) * kSignCodeBits * d + j] =
        start[int64_t(slot) * kSignCodeBits * d + j] / static_cast<float>(length);
}

template <int D>
void fit(const BinaryFitProjectionArgs& args, cudaStream_t stream) {
  const FitWorkspace w = carve(args.workspace, args.n_slots, args.length, D);
  const int chunks = chunks_of(args.length);
  const int64_t per_slot = int64_t(args.length) * D;
  init_residual_kernel<<<dim3(std::min<int64_t>((per_slot + 255) / 256, 1024), args.n_slots), 256,
                         0, stream>>>(args.keys, per_slot, w.residual);
  check(cudaMemsetAsync(w.signs, 0, size_t(args.n_slots) * args.length, stream), "memset");
  const dim3 grid(chunks, args.n_slots);
  const int64_t row_stride = int64_t(kSignCodeBits) * D;
  for (int bit = 0; bit < kSignCodeBits; ++bit) {
    const float* start = args.starts + int64_t(bit) * D;
    float* row = args.projection + int64_t(bit) * D;
    const float* previous = bit > 0 ? args.projection + int64_t(bit - 1) * D : nullptr;
    for (int t = 0; t < args.iterations; ++t) {
      const bool first = t == 0;
      fit_pass_kernel<D><<<grid, kFitThreads, 0, stream>>>(w, args.length, first ? start : w.vector,
                                                           first ? row_stride : D, previous,
                                                           first && bit > 0, true);
      fit_reduce_kernel<<<args.n_slots, D, 0, stream>>>(w, chunks, D, args.length,
                                                        t + 1 == args.iterations ? row : nullptr);
    }
    if (args.iterations == 0) {
      fit_scale_kernel<<<args.n_slots, D, 0, stream>>>(start, D, args.length, row);
      fit_pass_kernel<D><<<grid, kFitThreads, 0, stream>>>(w, args.length, start, row_stride,
                                                           previous, bit > 0, false);
    }
    if (args.recompute_signs)
      fit_pass_kernel<D><<<grid, kFitThreads, 0, stream>>>(w, args.length, row, row_stride, nullptr,
                                                           false, false);
  }
}

}  // namespace

size_t binary_fit_projection_workspace_bytes(int n_slots, int length, int head_dim) {
  return aligned(size_t(n_slots) * length * head_dim * 4) + aligned(size_t(n_slots) * length) +
         aligned(size_t(n_slots) * chunks_of(length) * head_dim * 8) +
         aligned(size_t(n_slots) * head_dim * 4);
}

void binary_fit_projection(const BinaryFitProjectionArgs& args, cudaStream_t stream) {
  if (args.n_slots <= 0) return;
  if (args.length <= 0) throw std::invalid_argument("binary_fit_projection: no keys to fit");
  if (args.iterations < 0) throw std::invalid_argument("binary_fit_projection: iterations < 0");
  with_constant<64, 128>(args.head_dim, "binary_fit_projection: head_dim",
                         [&](auto dim) { fit<decltype(dim)::value>(args, stream); });
  check(cudaGetLastError(), "binary_fit_projection launch");
}

}  // namespace kvb::cuda
