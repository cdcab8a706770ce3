#include <algorithm>
#include <cfloat>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/transformer_ops.h"

namespace kvb::cuda {
namespace {

__global__ void embedding_kernel(const __nv_bfloat16* table, const int32_t* ids, int d_model,
                                 float* residual) {
  wait_for_predecessor();
  allow_successor_launch();
  const int row = blockIdx.x;
  const __nv_bfloat16* src = table + int64_t(ids[row]) * d_model;
  for (int j = threadIdx.x; j < d_model; j += blockDim.x)
    residual[int64_t(row) * d_model + j] = __bfloat162float(src[j]);
}

// The start of a folded-norm chain (see FoldedNorm): one block per row.
constexpr int kFoldThreads = 256;
__global__ void __launch_bounds__(kFoldThreads)
    fold_rmsnorm_kernel(const float* residual, int d_model, FoldedNorm norm) {
  wait_for_predecessor();
  allow_successor_launch();
  const int64_t row = blockIdx.x;
  float sum_sq = 0.f;
  for (int j = threadIdx.x; j < d_model; j += kFoldThreads) {
    const float value = residual[row * d_model + j];
    sum_sq += value * value;
    norm.scaled[row * d_model + j] = __float2bfloat16(value * __bfloat162float(norm.gain[j]));
  }
  const float total = block_sum(sum_sq);
  if (threadIdx.x < kFoldedNormLines)
    norm.sum_sq[folded_norm_word(threadIdx.x, row)] = threadIdx.x == 0 ? total : 0.0;
}

// Copies the K and V heads of qkv row `row` into the cache (one block per row), kWidth bf16 values
// per access: 8 (16-byte loads and stores) when head_dim and the buffers allow it, else 1.
template <int kWidth>
__device__ void append_kv_row(const __nv_bfloat16* qkv, int row, int rows_per_seq,
                              int n_query_heads, int n_kv_heads, int head_dim,
                              const int64_t* kv_offset, const int32_t* kv_length, __nv_bfloat16* k,
                              __nv_bfloat16* v) {
  using Chunk = std::conditional_t<kWidth == 8, int4, __nv_bfloat16>;
  static_assert(sizeof(Chunk) == kWidth * sizeof(__nv_bfloat16));
  const int seq = row / rows_per_seq;
  const int within = row % rows_per_seq;
  const int width = (n_query_heads + 2 * n_kv_heads) * head_dim;
  const __nv_bfloat16* src = qkv + int64_t(row) * width + n_query_heads * head_dim;
  const int chunks_per_head = head_dim / kWidth;
  for (int idx = threadIdx.x; idx < n_kv_heads * chunks_per_head; idx += blockDim.x) {
    const int h = seq * n_kv_heads + idx / chunks_per_head;
    const int j = (idx % chunks_per_head) * kWidth;
    const int64_t slot = (kv_offset[h] + kv_length[h] + within) * head_dim + j;
    const int from = idx * kWidth;
    *reinterpret_cast<Chunk*>(k + slot) = *reinterpret_cast<const Chunk*>(src + from);
    *reinterpret_cast<Chunk*>(v + slot) =
        *reinterpret_cast<const Chunk*>(src + n_kv_heads * head_dim + from);
  }
}

// 16-byte copies need head_dim a multiple of 8 and every buffer 16-byte aligned (rows then are).
bool append_kv_vectorizable(const void* qkv, int head_dim, const void* k, const void* v) {
  return head_dim % 8 == 0 && aligned_to(16, qkv, k, v);
}

template <int kWidth>
__global__ void append_kv_kernel(const __nv_bfloat16* qkv, int rows_per_seq, int n_query_heads,
                                 int n_kv_heads, int head_dim, const int64_t* kv_offset,
                                 const int32_t* kv_length, __nv_bfloat16* k, __nv_bfloat16* v) {
  wait_for_predecessor();
  allow_successor_launch();
  append_kv_row<kWidth>(qkv, blockIdx.x, rows_per_seq, n_query_heads, n_kv_heads, head_dim,
                        kv_offset, kv_length, k, v);
}

// The decode step's bias + RoPE + KV append + length advance, one block per sequence: this block
// is the only reader of its sequence's head lengths, so it can advance them once its row is in.
template <int kWidth>
__global__ void rope_append_decode_kernel(RopeArgs args, const int64_t* kv_offset,
                                          int32_t* kv_length, __nv_bfloat16* k, __nv_bfloat16* v) {
  wait_for_predecessor();
  allow_successor_launch();
  const int seq = blockIdx.x;
  apply_rope_row(args, seq);
  __syncthreads();
  append_kv_row<kWidth>(args.qkv, seq, 1, args.n_query_heads, args.n_kv_heads, args.head_dim,
                        kv_offset, kv_length, k, v);
  __syncthreads();
  if (threadIdx.x < args.n_kv_heads) kv_length[seq * args.n_kv_heads + threadIdx.x] += 1;
}

__global__ void f32_to_bf16_kernel(const float* in, size_t count, __nv_bfloat16* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}
__global__ void bf16_to_f32_kernel(const __nv_bfloat16* in, size_t count, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__global__ void fill_random_kernel(__nv_bfloat16* out, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = splitmix64(seed * 0x100000001B3ull + i);
    const float u = float(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}

__global__ void read_kernel(const int4* data, size_t count, int* sink) {
  int4 acc = make_int4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    const int4 v = data[i];
    acc.x ^= v.x;
    acc.y ^= v.y;
    acc.z ^= v.z;
    acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x7fffffff) *sink = 1;  // keeps the loads alive
}

int grid_for(size_t count, int threads) {
  return int(std::min<size_t>((count + threads - 1) / threads, 65535));
}

}  // namespace

void embedding_gather(const __nv_bfloat16* table, const int32_t* ids, int n, int d_model,
                      float* residual, cudaStream_t stream) {
  if (n == 0) return;
  launch_overlapped(embedding_kernel, n, 256, 0, stream, "embedding_kernel", table, ids, d_model,
                    residual);
}

void fold_rmsnorm(const float* residual, int n, int d_model, const FoldedNorm& norm,
                  cudaStream_t stream) {
  if (n == 0) return;
  launch_overlapped(fold_rmsnorm_kernel, n, kFoldThreads, 0, stream, "fold_rmsnorm_kernel",
                    residual, d_model, norm);
}

void append_kv(const __nv_bfloat16* qkv, int n, int rows_per_seq, int n_query_heads, int n_kv_heads,
               int head_dim, const int64_t* kv_offset, const int32_t* kv_length, __nv_bfloat16* k,
               __nv_bfloat16* v, cudaStream_t stream) {
  if (n == 0) return;
  const auto kernel =
      append_kv_vectorizable(qkv, head_dim, k, v) ? append_kv_kernel<8> : append_kv_kernel<1>;
  launch_overlapped(kernel, n, 256, 0, stream, "append_kv_kernel", qkv, rows_per_seq, n_query_heads,
                    n_kv_heads, head_dim, kv_offset, kv_length, k, v);
}

void rope_append_kv_decode(const RopeArgs& rope, const int64_t* kv_offset, int32_t* kv_length,
                           __nv_bfloat16* k, __nv_bfloat16* v, cudaStream_t stream) {
  if (rope.n == 0) return;
  const auto kernel = append_kv_vectorizable(rope.qkv, rope.head_dim, k, v)
                          ? rope_append_decode_kernel<8>
                          : rope_append_decode_kernel<1>;
  launch_overlapped(kernel, rope.n, 1024, 0, stream, "rope_append_decode_kernel", rope, kv_offset,
                    kv_length, k, v);
}

__global__ void advance_kernel(int32_t* lengths, int count, int32_t* positions, int n_positions,
                               int delta) {
  wait_for_predecessor();
  allow_successor_launch();
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < max(count, n_positions);
       i += blockDim.x * gridDim.x) {
    if (i < count) lengths[i] += delta;
    if (i < n_positions) positions[i] += delta;
  }
}

void advance_lengths(int32_t* lengths, int count, int32_t* positions, int n_positions, int delta,
                     cudaStream_t stream) {
  const int total = std::max(count, n_positions);
  if (total == 0) return;
  launch_overlapped(advance_kernel, grid_for(total, 256), 256, 0, stream, "advance_kernel", lengths,
                    count, positions, n_positions, delta);
}

constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* logits, int vocab, int32_t* next) {
  wait_for_predecessor();
  allow_successor_launch();
  const float* row = logits + int64_t(blockIdx.x) * vocab;
  float best = -INFINITY;
  int best_index = 0;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    if (row[j] > best) {
      best = row[j];
      best_index = j;
    }
  }
  __shared__ float s_value[kArgmaxThreads];
  __shared__ int s_index[kArgmaxThreads];
  s_value[threadIdx.x] = best;
  s_index[threadIdx.x] = best_index;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float other = s_value[threadIdx.x + stride];
      const int other_index = s_index[threadIdx.x + stride];
      if (other > s_value[threadIdx.x] ||
          (other == s_value[threadIdx.x] && other_index < s_index[threadIdx.x])) {
        s_value[threadIdx.x] = other;
        s_index[threadIdx.x] = other_index;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) next[blockIdx.x] = s_index[0];
}

// kWidth bf16 values per access: 8 (16-byte loads and stores) when rows and buffers allow it, else
// 1, so that rows of any length are copied whole.
template <int kWidth>
__global__ void copy_rows_kernel(const __nv_bfloat16* src, __nv_bfloat16* dst,
                                 const int64_t* src_rows, const int64_t* dst_rows, int64_t n_rows,
                                 int row_elems) {
  using Chunk = std::conditional_t<kWidth == 8, int4, __nv_bfloat16>;
  const int chunks = row_elems / kWidth;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_rows * chunks;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / chunks;
    const int c = int(i % chunks);
    reinterpret_cast<Chunk*>(dst + dst_rows[row] * row_elems)[c] =
        reinterpret_cast<const Chunk*>(src + src_rows[row] * row_elems)[c];
  }
}

void copy_rows(const __nv_bfloat16* src, __nv_bfloat16* dst, const int64_t* src_rows,
               const int64_t* dst_rows, int64_t n_rows, int row_elems, cudaStream_t stream) {
  if (n_rows == 0 || row_elems == 0) return;
  const bool wide = row_elems % 8 == 0 && aligned_to(16, src, dst);
  const int width = wide ? 8 : 1;
  const auto kernel = wide ? copy_rows_kernel<8> : copy_rows_kernel<1>;
  kernel<<<grid_for(n_rows * (row_elems / width), 256), 256, 0, stream>>>(
      src, dst, src_rows, dst_rows, n_rows, row_elems);
  check(cudaGetLastError(), "copy_rows_kernel");
}

void argmax_rows(const float* logits, int rows, int vocab, int32_t* next, cudaStream_t stream) {
  if (rows == 0) return;
  launch_overlapped(argmax_kernel, rows, kArgmaxThreads, 0, stream, "argmax_kernel", logits, vocab,
                    next);
}

void f32_to_bf16(const float* in, size_t count, __nv_bfloat16* out, cudaStream_t stream) {
  if (count == 0) return;
  f32_to_bf16_kernel<<<grid_for(count, 256), 256, 0, stream>>>(in, count, out);
  check(cudaGetLastError(), "f32_to_bf16_kernel");
}

void bf16_to_f32(const __nv_bfloat16* in, size_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  bf16_to_f32_kernel<<<grid_for(count, 256), 256, 0, stream>>>(in, count, out);
  check(cudaGetLastError(), "bf16_to_f32_kernel");
}

void fill_random_bf16(__nv_bfloat16* out, size_t count, uint64_t seed, float scale,
                      cudaStream_t stream) {
  if (count == 0) return;
  fill_random_kernel<<<grid_for(count, 256), 256, 0, stream>>>(out, count, seed, scale);
  check(cudaGetLastError(), "fill_random_kernel");
}

double measure_read_bandwidth_gbs(size_t bytes, int repeats) {
  DeviceBuffer data(bytes, "bandwidth probe"), sink(sizeof(int), "sink");
  check(cudaMemset(data.data(), 1, bytes), "cudaMemset");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const size_t count = bytes / sizeof(int4);
  const int blocks = device_info().sm_count * 8;
  float best_ms = FLT_MAX;
  for (int r = 0; r < repeats + 1; ++r) {
    cudaEventRecord(start);
    read_kernel<<<blocks, 512>>>(data.as<int4>(), count, sink.as<int>());
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0) best_ms = std::min(best_ms, ms);  // first run is the warm-up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  check(cudaGetLastError(), "read_kernel");
  return double(bytes) / (best_ms * 1e-3) / 1e9;
}

double measure_gemm_tflops(cublasHandle_t handle, int size, int repeats) {
  const size_t elems = size_t(size) * size;
  DeviceBuffer a(elems * 2, "gemm a"), b(elems * 2, "gemm b"), c(elems * 2, "gemm c");
  fill_random_bf16(a.as<__nv_bfloat16>(), elems, 1, 1.f, nullptr);
  fill_random_bf16(b.as<__nv_bfloat16>(), elems, 2, 1.f, nullptr);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best_ms = FLT_MAX;
  for (int r = 0; r < repeats + 1; ++r) {
    cudaEventRecord(start);
    matmul(handle, a.as<__nv_bfloat16>(), b.as<__nv_bfloat16>(), c.as<__nv_bfloat16>(), size, size,
           size, nullptr);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0) best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * size * size * double(size) / (best_ms * 1e-3) / 1e12;
}

}  // namespace kvb::cuda
