#include <algorithm>
#include <cfloat>
#include <string>

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

__device__ float block_sum(float value) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off /= 2) value += __shfl_xor_sync(0xffffffff, value, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  value = lane < warps ? partial[lane] : 0.f;
  for (int off = 16; off > 0; off /= 2) value += __shfl_xor_sync(0xffffffff, value, off);
  __syncthreads();
  return value;
}

// One block per row holding the row in registers, so each element is read once and the loads of a
// row all leave before the first use (a decode step's rows are single blocks: latency, not
// bandwidth, sets their time).
constexpr int kNormThreads = 1024;
constexpr int kNormMaxPerThread = 16;

__global__ void __launch_bounds__(kNormThreads) add_rmsnorm_kernel(float* residual,
                                                                  const __nv_bfloat16* delta,
                                                                  const __nv_bfloat16* weight,
                                                                  int d_model, float eps,
                                                                  __nv_bfloat16* out) {
  float scales[kNormMaxPerThread];  // the weights: constant, so read before the wait
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int j = threadIdx.x + k * kNormThreads;
    scales[k] = j < d_model ? __bfloat162float(weight[j]) : 0.f;
  }
  wait_for_predecessor();
  allow_successor_launch();
  const int64_t row = blockIdx.x;
  float* x = residual + row * d_model;
  float values[kNormMaxPerThread];
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int j = threadIdx.x + k * kNormThreads;
    values[k] = 0.f;
    if (j < d_model) {
      float value = x[j];
      if (delta) {
        value += __bfloat162float(delta[row * d_model + j]);
        x[j] = value;
      }
      values[k] = value;
      sum_sq += value * value;
    }
  }
  const float inv = rsqrtf(block_sum(sum_sq) / d_model + eps);
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int j = threadIdx.x + k * kNormThreads;
    if (j < d_model) out[row * d_model + j] = __float2bfloat16(values[k] * inv * scales[k]);
  }
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

// Prefill's many rows: 256 threads per row, 4 consecutive values per access (16-byte residual, 8-byte
// delta and output), so a 32K-row norm streams at the memory's rate instead of one scalar per thread.
constexpr int kRowsNormThreads = 256;
constexpr int kRowsNormMaxChunks = 8;  // d_model <= 256 * 4 * 8 = 8,192
constexpr int kRowsNormMinRows = 16;

struct Bf16x4 {
  __nv_bfloat162 lo, hi;
};

__global__ void __launch_bounds__(kRowsNormThreads) add_rmsnorm_rows_kernel(
    float* residual, const __nv_bfloat16* delta, const __nv_bfloat16* weight, int d_model, float eps,
    __nv_bfloat16* out) {
  wait_for_predecessor();
  allow_successor_launch();
  const int64_t row = blockIdx.x;
  const int chunks = d_model / 4;
  auto* x = reinterpret_cast<float4*>(residual + row * d_model);
  float4 values[kRowsNormMaxChunks];
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kRowsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * kRowsNormThreads;
    values[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < chunks) {
      float4 value = x[c];
      if (delta) {
        const Bf16x4 d = reinterpret_cast<const Bf16x4*>(delta + row * d_model)[c];
        const float2 lo = __bfloat1622float2(d.lo), hi = __bfloat1622float2(d.hi);
        value = make_float4(value.x + lo.x, value.y + lo.y, value.z + hi.x, value.w + hi.y);
        x[c] = value;
      }
      values[k] = value;
      sum_sq += value.x * value.x + value.y * value.y + value.z * value.z + value.w * value.w;
    }
  }
  const float inv = rsqrtf(block_sum(sum_sq) / d_model + eps);
#pragma unroll
  for (int k = 0; k < kRowsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * kRowsNormThreads;
    if (c < chunks) {
      const Bf16x4 w = reinterpret_cast<const Bf16x4*>(weight)[c];
      const float2 wlo = __bfloat1622float2(w.lo), whi = __bfloat1622float2(w.hi);
      const float4 v = values[k];
      Bf16x4 o;
      o.lo = __floats2bfloat162_rn(v.x * inv * wlo.x, v.y * inv * wlo.y);
      o.hi = __floats2bfloat162_rn(v.z * inv * whi.x, v.w * inv * whi.y);
      reinterpret_cast<Bf16x4*>(out + row * d_model)[c] = o;
    }
  }
}

bool rows_norm_applies(int n, int d_model, const void* residual, const void* delta, const void* weight,
                       const void* out) {
  return n >= kRowsNormMinRows && d_model % 4 == 0 &&
         d_model <= kRowsNormThreads * 4 * kRowsNormMaxChunks && aligned_to(16, residual) &&
         aligned_to(8, delta, weight, out);
}

// Adds the bias to a qkv row and rotates its Q and K heads (one block per row). A rotation angle
// depends on the position and the pair index only, so each thread takes one pair index for a group of
// heads and computes its sine and cosine once for all of them (per element, the sincosf work was
// the costliest part of a long prefill's RoPE: results/gpu-kernel-tuning.md §3.1).
__device__ void bias_rope_row(const RopeArgs& args, int row) {
  const int heads = args.n_query_heads + 2 * args.n_kv_heads;
  const int width = heads * args.head_dim;
  __nv_bfloat16* x = args.qkv + int64_t(row) * width;
  if (args.bias)
    for (int j = threadIdx.x; j < width; j += blockDim.x)
      x[j] = __float2bfloat16(with_bias(x[j], args.bias, j));
  __syncthreads();
  const int half = args.head_dim / 2;
  const int rotated_heads = args.n_query_heads + args.n_kv_heads;  // Q and K, not V
  const int head_groups = max(1, min(int(blockDim.x) / half, rotated_heads));
  const float position = float(args.positions[row]);
  for (int idx = threadIdx.x; idx < head_groups * half; idx += blockDim.x) {
    const int i = idx % half;
    float s, c;
    sincosf(position * args.inv_freq[i], &s, &c);
    int a, b;
    rope_pair_columns(i, half, args.interleaved, a, b);
    for (int head = idx / half; head < rotated_heads; head += head_groups) {
      __nv_bfloat16* h = x + head * args.head_dim;
      rotate_pair(__bfloat162float(h[a]), __bfloat162float(h[b]), s, c, h[a], h[b]);
    }
  }
}

__global__ void bias_rope_kernel(RopeArgs args) {
  wait_for_predecessor();
  allow_successor_launch();
  bias_rope_row(args, blockIdx.x);
}

// Copies the K and V heads of qkv row `row` into the cache (one block per row), kWidth bf16 values
// per access: 8 (16-byte loads and stores) when head_dim and the buffers allow it, else 1.
template <int kWidth>
__device__ void append_kv_row(const __nv_bfloat16* qkv, int row, int rows_per_seq, int n_query_heads,
                              int n_kv_heads, int head_dim, const int64_t* kv_offset,
                              const int32_t* kv_length, __nv_bfloat16* k, __nv_bfloat16* v) {
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
    *reinterpret_cast<Chunk*>(v + slot) = *reinterpret_cast<const Chunk*>(src + n_kv_heads * head_dim + from);
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
  append_kv_row<kWidth>(qkv, blockIdx.x, rows_per_seq, n_query_heads, n_kv_heads, head_dim, kv_offset,
                kv_length, k, v);
}

// The decode step's bias + RoPE + KV append + length advance, one block per sequence: this block
// is the only reader of its sequence's head lengths, so it can advance them once its row is in.
template <int kWidth>
__global__ void rope_append_decode_kernel(RopeArgs args, const int64_t* kv_offset,
                                          int32_t* kv_length, __nv_bfloat16* k,
                                          __nv_bfloat16* v) {
  wait_for_predecessor();
  allow_successor_launch();
  const int seq = blockIdx.x;
  bias_rope_row(args, seq);
  __syncthreads();
  append_kv_row<kWidth>(args.qkv, seq, 1, args.n_query_heads, args.n_kv_heads, args.head_dim, kv_offset,
                kv_length, k, v);
  __syncthreads();
  if (threadIdx.x < args.n_kv_heads) kv_length[seq * args.n_kv_heads + threadIdx.x] += 1;
}

// silu(gate) * up for rows [gate | up] of width 2 ffn. Rows on the grid's y axis and 32-bit column
// indices: per element a 64-bit division and remainder cost more than the memory traffic (a 32K
// prefill has 470 M elements per layer). kWidth values per access: 8 (16-byte) when aligned, else 1.
template <int kWidth>
__global__ void swiglu_kernel(const __nv_bfloat16* gate_up, int n, int ffn, __nv_bfloat16* out) {
  using Chunk = std::conditional_t<kWidth == 8, int4, __nv_bfloat16>;
  wait_for_predecessor();
  allow_successor_launch();
  const int chunks = ffn / kWidth;
  for (int64_t row = blockIdx.y; row < n; row += gridDim.y) {
    const __nv_bfloat16* gate = gate_up + row * 2 * ffn;
    const __nv_bfloat16* up = gate + ffn;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += gridDim.x * blockDim.x) {
      Chunk g_chunk = reinterpret_cast<const Chunk*>(gate)[c];
      Chunk u_chunk = reinterpret_cast<const Chunk*>(up)[c];
      Chunk result;
      const auto* g = reinterpret_cast<const __nv_bfloat16*>(&g_chunk);
      const auto* u = reinterpret_cast<const __nv_bfloat16*>(&u_chunk);
      auto* r = reinterpret_cast<__nv_bfloat16*>(&result);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        const float gv = __bfloat162float(g[e]);
        r[e] = __float2bfloat16(gv / (1.f + __expf(-gv)) * __bfloat162float(u[e]));
      }
      reinterpret_cast<Chunk*>(out + row * ffn)[c] = result;
    }
  }
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
    acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
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
  launch_overlapped(embedding_kernel, n, 256, 0, stream, "embedding_kernel", table, ids, d_model, residual);
}

void add_rmsnorm(float* residual, const __nv_bfloat16* delta, const __nv_bfloat16* weight, int n,
                 int d_model, float eps, __nv_bfloat16* out, cudaStream_t stream) {
  if (n == 0) return;
  if (d_model > kNormThreads * kNormMaxPerThread)
    throw std::invalid_argument("add_rmsnorm: d_model " + std::to_string(d_model) + " exceeds " +
                                std::to_string(kNormThreads * kNormMaxPerThread));
  if (rows_norm_applies(n, d_model, residual, delta, weight, out))
    launch_overlapped(add_rmsnorm_rows_kernel, n, kRowsNormThreads, 0, stream, "add_rmsnorm_rows_kernel",
                      residual, delta, weight, d_model, eps, out);
  else
    launch_overlapped(add_rmsnorm_kernel, n, kNormThreads, 0, stream, "add_rmsnorm_kernel", residual,
                      delta, weight, d_model, eps, out);
}

void fold_rmsnorm(const float* residual, int n, int d_model, const FoldedNorm& norm,
                  cudaStream_t stream) {
  if (n == 0) return;
  launch_overlapped(fold_rmsnorm_kernel, n, kFoldThreads, 0, stream, "fold_rmsnorm_kernel",
                    residual, d_model, norm);
}

void bias_rope(const RopeArgs& args, cudaStream_t stream) {
  if (args.n == 0) return;
  launch_overlapped(bias_rope_kernel, args.n, 256, 0, stream, "bias_rope_kernel", args);
}

void append_kv(const __nv_bfloat16* qkv, int n, int rows_per_seq, int n_query_heads, int n_kv_heads,
               int head_dim, const int64_t* kv_offset, const int32_t* kv_length, __nv_bfloat16* k,
               __nv_bfloat16* v, cudaStream_t stream) {
  if (n == 0) return;
  const auto kernel = append_kv_vectorizable(qkv, head_dim, k, v) ? append_kv_kernel<8> : append_kv_kernel<1>;
  launch_overlapped(kernel, n, 256, 0, stream, "append_kv_kernel", qkv, rows_per_seq, n_query_heads,
                    n_kv_heads, head_dim, kv_offset, kv_length, k, v);
}

void rope_append_kv_decode(const RopeArgs& rope, const int64_t* kv_offset, int32_t* kv_length,
                           __nv_bfloat16* k, __nv_bfloat16* v, cudaStream_t stream) {
  if (rope.n == 0) return;
  const auto kernel = append_kv_vectorizable(rope.qkv, rope.head_dim, k, v) ? rope_append_decode_kernel<8>
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

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* logits, int vocab, int32_t* next) {
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

__global__ void copy_rows_kernel(const __nv_bfloat16* src, __nv_bfloat16* dst,
                                 const int64_t* src_rows, const int64_t* dst_rows, int64_t n_rows,
                                 int row_elems) {
  const int chunks = row_elems / 8;  // 16-byte chunks
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_rows * chunks;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / chunks;
    const int c = int(i % chunks);
    reinterpret_cast<int4*>(dst + dst_rows[row] * row_elems)[c] =
        reinterpret_cast<const int4*>(src + src_rows[row] * row_elems)[c];
  }
}

void copy_rows(const __nv_bfloat16* src, __nv_bfloat16* dst, const int64_t* src_rows,
               const int64_t* dst_rows, int64_t n_rows, int row_elems, cudaStream_t stream) {
  if (n_rows == 0) return;
  copy_rows_kernel<<<grid_for(n_rows * (row_elems / 8), 256), 256, 0, stream>>>(
      src, dst, src_rows, dst_rows, n_rows, row_elems);
  check(cudaGetLastError(), "copy_rows_kernel");
}

void argmax_rows(const float* logits, int rows, int vocab, int32_t* next, cudaStream_t stream) {
  if (rows == 0) return;
  launch_overlapped(argmax_kernel, rows, kArgmaxThreads, 0, stream, "argmax_kernel", logits, vocab, next);
}

void swiglu(const __nv_bfloat16* gate_up, int n, int ffn, __nv_bfloat16* out, cudaStream_t stream) {
  if (int64_t(n) * ffn == 0) return;
  const bool vectorized =
      ffn % 8 == 0 && aligned_to(16, gate_up, out);
  const int width = vectorized ? 8 : 1;
  constexpr int kThreads = 256;
  const dim3 grid((ffn / width + kThreads - 1) / kThreads, std::min(n, 65535));
  launch_overlapped(vectorized ? swiglu_kernel<8> : swiglu_kernel<1>, grid, kThreads, 0, stream,
                    "swiglu_kernel", gate_up, n, ffn, out);
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
    gemm_bf16(handle, a.as<__nv_bfloat16>(), b.as<__nv_bfloat16>(), c.as<__nv_bfloat16>(), size,
              size, size, nullptr);
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
