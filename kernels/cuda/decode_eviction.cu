// Decode-time eviction's kernels. Contract: kernels/cuda/decode_eviction.h; CPU twins:
// kernels/cpu/decode_eviction.h (the same sums in the same order, with IEEE adds and divides).
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/decode_eviction.h"
#include "kernels/cuda/launch.cuh"

namespace kvb::cuda {
namespace {

constexpr int kThreads = 128;       // entries per block of the elementwise kernels
constexpr int kEvictThreads = 256;  // one block per slot
constexpr int kTileRows = 32;       // rows moved per round of the compaction (one warp's flags)
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ float rounded(float x, bool round) {
  return round ? round_to_bf16(x) : x;
}

__global__ void __launch_bounds__(kThreads)
    attention_probabilities_kernel(AttentionProbabilitiesArgs a) {
  wait_for_predecessor();
  allow_successor_launch();
  const int row = blockIdx.y, j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= a.width) return;
  const int b = row / a.n_query_heads, q = row % a.n_query_heads;
  const int length = a.lengths[b * a.n_kv_heads + q / (a.n_query_heads / a.n_kv_heads)];
  float* logit = a.logits + row * a.stride + j;
  const float lse = a.lse[int64_t(q) * a.batch + b];
  *logit = j < length ? expf(__fsub_rn(__fmul_rn(*logit, a.scale), lse)) : 0.f;
}

// The twin's pooled(): Σ of the window's (rounded) values / k, rounded.
__device__ float pooled(const float* p, int j, int prefix, int kernel, bool round) {
  const int half = kernel / 2;
  float sum = 0.f;
  for (int i = max(0, j - half); i <= min(prefix - 1, j + half); ++i)
    sum = __fadd_rn(sum, rounded(p[i], round));
  return rounded(__fdiv_rn(sum, float(kernel)), round);
}

__global__ void __launch_bounds__(kThreads) eviction_scores_kernel(EvictionScoresArgs a) {
  wait_for_predecessor();
  allow_successor_launch();
  const int slot = blockIdx.y, j = blockIdx.x * kThreads + threadIdx.x;
  const int length = a.lengths[slot];
  if (j >= length) return;
  const int b = slot / a.n_kv_heads, h = slot % a.n_kv_heads;
  const int group = a.n_query_heads / a.n_kv_heads;
  const float* rows = a.probabilities + int64_t(b) * a.n_query_heads * a.probability_stride;
  float* score = a.scores + slot * a.score_stride + j;
  if (a.statistic == EvictionStatistic::kAccumulatedGroupSum) {
    float sum = *score;
    for (int q = h * group; q < (h + 1) * group; ++q)
      sum = __fadd_rn(sum, rows[q * a.probability_stride + j]);
    *score = sum;
  } else if (a.statistic == EvictionStatistic::kLayerMean) {
    float mean = 0.f;
    for (int q = 0; q < a.n_query_heads; ++q)
      mean = __fadd_rn(mean, __fdiv_rn(rows[q * a.probability_stride + j], float(a.n_query_heads)));
    *score = mean;
  } else {
    const int prefix = length - a.recent;
    float sum = 0.f;
    for (int q = h * group; j < prefix && q < (h + 1) * group; ++q)
      sum = __fadd_rn(
          sum, pooled(rows + q * a.probability_stride, j, prefix, a.pool_kernel, a.round_bf16));
    *score = j < prefix ? __fdiv_rn(sum, float(group)) : 0.f;
  }
}

// kernels::eviction_rank_key on the device: larger keys stay first.
__device__ __forceinline__ unsigned long long rank_key(float score, int position) {
  if (isnan(score)) score = -INFINITY;
  if (score == 0.f) score = 0.f;
  const unsigned bits = __float_as_uint(score);
  const unsigned ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (static_cast<unsigned long long>(ordered) << 32) | (0xffffffffu - unsigned(position));
}

__device__ unsigned long long block_min(unsigned long long value) {
  __shared__ unsigned long long partial[kEvictThreads / 32];
  for (int off = 16; off > 0; off /= 2) value = min(value, __shfl_xor_sync(0xffffffff, value, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  value = lane < kEvictThreads / 32 ? partial[lane] : ~0ull;
  for (int off = 16; off > 0; off /= 2) value = min(value, __shfl_xor_sync(0xffffffff, value, off));
  __syncthreads();
  return value;
}

// kernels::evicted_length on the device.
__device__ __forceinline__ int kept_after(int length, const EvictToKeepArgs& a) {
  if (a.keep < 0 || length <= a.keep) return length;
  const int sinks = min(max(a.sinks, 0), length);
  return max(a.keep, sinks + min(max(a.recent, 0), length - sinks));
}

// The slot's rows [first, length) move down to their kept places, kTileRows at a time: each round
// stages its kept rows in shared memory before writing any (a destination is at most its source, so
// rows of later rounds are never overwritten before they are read).
__device__ void compact_slot(const EvictToKeepArgs& a, int slot, int length, int first,
                             unsigned long long threshold, int begin, int end) {
  __shared__ uint4 tile[2][kTileRows * kMaxHeadDim / 8];
  __shared__ int dest[kTileRows];
  __shared__ int base;
  const int words = a.head_dim / 8, lane = threadIdx.x % 32;
  uint4* keys = reinterpret_cast<uint4*>(a.keys + a.kv_offset[slot] * a.head_dim);
  uint4* values = reinterpret_cast<uint4*>(a.values + a.kv_offset[slot] * a.head_dim);
  float* scores = a.scores + slot * a.score_stride;
  int32_t* ids = a.entry_ids ? a.entry_ids + slot * a.score_stride : nullptr;
  if (threadIdx.x == 0) base = first;
  __syncthreads();
  for (int c = first; c < length; c += kTileRows) {
    float score = 0.f;
    int32_t id = 0;
    if (threadIdx.x < 32) {
      const int j = c + lane;
      const bool candidate = j >= begin && j < end;
      const bool kept = j < length && (!candidate || rank_key(scores[j], j) > threshold);
      const unsigned mask = __ballot_sync(0xffffffff, kept);
      dest[lane] = kept ? base + __popc(mask & ((1u << lane) - 1)) : -1;
      if (kept && a.compact_scores) score = scores[j];
      if (kept && ids) id = ids[j];
      __syncwarp();
      if (kept && a.compact_scores) scores[dest[lane]] = score;
      if (kept && ids) ids[dest[lane]] = id;
      if (lane == 0) base += __popc(mask);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kTileRows * words; i += kEvictThreads) {
      const int r = i / words, j = c + r;
      if (dest[r] < 0) continue;
      tile[0][i] = keys[int64_t(j) * words + i % words];
      tile[1][i] = values[int64_t(j) * words + i % words];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kTileRows * words; i += kEvictThreads) {
      const int r = i / words;
      if (dest[r] < 0) continue;
      keys[int64_t(dest[r]) * words + i % words] = tile[0][i];
      values[int64_t(dest[r]) * words + i % words] = tile[1][i];
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kEvictThreads) evict_to_keep_kernel(EvictToKeepArgs a) {
  wait_for_predecessor();
  allow_successor_launch();
  const int slot = blockIdx.x;
  const int length = a.lengths[slot];
  if (a.entry_ids && threadIdx.x == 0 && length > 0)
    a.entry_ids[slot * a.score_stride + length - 1] = a.appended_ids[slot / a.n_kv_heads];
  __syncthreads();  // the compaction's warp reads the id just written
  const int kept = kept_after(length, a);
  if (kept == length) return;
  const int begin = min(max(a.sinks, 0), length);
  const int end = length - min(max(a.recent, 0), length - begin);
  const float* scores = a.scores + slot * a.score_stride;
  // The e-th lowest key among the candidates: e passes, each the lowest above the last.
  unsigned long long threshold = 0;
  for (int r = 0; r < length - kept; ++r) {
    unsigned long long lowest = ~0ull;
    for (int j = begin + threadIdx.x; j < end; j += kEvictThreads) {
      const unsigned long long key = rank_key(scores[j], j);
      if (key > threshold) lowest = min(lowest, key);
    }
    threshold = block_min(lowest);
  }
  // Rows before the first evicted one stay where they are.
  unsigned long long first = ~0ull;
  for (int j = begin + threadIdx.x; j < end; j += kEvictThreads)
    if (rank_key(scores[j], j) <= threshold) first = min(first, static_cast<unsigned long long>(j));
  first = block_min(first);
  compact_slot(a, slot, length, int(first), threshold, begin, end);
  if (a.compact_scores)
    for (int j = kept + threadIdx.x; j < length; j += kEvictThreads)
      a.scores[slot * a.score_stride + j] = 0.f;
  if (threadIdx.x == 0) a.lengths[slot] = kept;
}

void check_heads(int n_query_heads, int n_kv_heads, const char* kernel) {
  if (n_kv_heads < 1 || n_query_heads % n_kv_heads != 0)
    throw std::invalid_argument(std::string(kernel) + ": needs Hq = g * Hkv, got " +
                                std::to_string(n_query_heads) + " / " + std::to_string(n_kv_heads));
}

}  // namespace

void attention_probabilities(const AttentionProbabilitiesArgs& args, cudaStream_t stream) {
  check_heads(args.n_query_heads, args.n_kv_heads, "attention_probabilities");
  if (args.batch < 1 || args.width < 1) return;
  const dim3 grid((args.width + kThreads - 1) / kThreads, args.batch * args.n_query_heads);
  launch_overlapped(attention_probabilities_kernel, grid, dim3(kThreads), 0, stream,
                    "attention_probabilities", args);
}

void eviction_scores(const EvictionScoresArgs& args, cudaStream_t stream) {
  check_heads(args.n_query_heads, args.n_kv_heads, "eviction_scores");
  if (args.pool_kernel < 1 || args.pool_kernel % 2 == 0)
    throw std::invalid_argument("eviction_scores: the pooling kernel must be odd, got " +
                                std::to_string(args.pool_kernel));
  if (args.batch < 1 || args.width < 1) return;
  const dim3 grid((args.width + kThreads - 1) / kThreads, args.batch * args.n_kv_heads);
  launch_overlapped(eviction_scores_kernel, grid, dim3(kThreads), 0, stream, "eviction_scores",
                    args);
}

void evict_to_keep(const EvictToKeepArgs& args, cudaStream_t stream) {
  if (args.head_dim < 8 || args.head_dim % 8 != 0 || args.head_dim > kMaxHeadDim)
    throw std::invalid_argument("evict_to_keep: head_dim must be a multiple of 8 up to 256, got " +
                                std::to_string(args.head_dim));
  if (args.n_slots < 1 || args.keep < 0) return;
  launch_overlapped(evict_to_keep_kernel, dim3(args.n_slots), dim3(kEvictThreads), 0, stream,
                    "evict_to_keep", args);
}

}  // namespace kvb::cuda
