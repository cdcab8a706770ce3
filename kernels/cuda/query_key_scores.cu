// Exact q.k scores of every cached key. Contract: kernels/cuda/query_key_scores.h; CPU twin:
// kernels/cpu/query_key_scores.h.
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/query_key_scores.h"

namespace kvb::cuda {
namespace {

constexpr int kThreads = 128;  // keys per block
constexpr int kMaxGroup = 16;
constexpr int kMaxHeadDim = 256;

struct alignas(16) Bf16x8 {
  __nv_bfloat162 v[4];
};

// Thread = key of one slot; the group's queries sit in shared memory. Each thread reads its key
// row in 16-byte words and keeps one running sum per query head of the group, in dimension order
// with fused multiply-adds (the CPU twin's), so every key row is read once for the whole group.
__global__ void __launch_bounds__(kThreads) query_key_scores_kernel(QueryKeyScoresArgs args) {
  __shared__ float s_q[kMaxGroup * kMaxHeadDim];
  wait_for_predecessor();  // launched with launch_overlapped: nothing read before this
  allow_successor_launch();
  const int slot = blockIdx.y;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  const int group = args.n_query_heads / args.n_kv_heads;
  const int d = args.head_dim;
  const __nv_bfloat16* q = args.q + b * args.q_seq_stride + int64_t(h) * group * d;
  for (int i = threadIdx.x; i < group * d; i += kThreads) s_q[i] = __bfloat162float(q[i]);
  __syncthreads();
  const int j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= args.width) return;
  const int length = args.lengths ? args.lengths[slot] : args.length;
  float sum[kMaxGroup];
#pragma unroll
  for (int a = 0; a < kMaxGroup; ++a) sum[a] = 0.f;
  if (j < length) {
    const Bf16x8* key =
        reinterpret_cast<const Bf16x8*>(args.keys + slot * args.key_slot_stride + int64_t(j) * d);
    for (int chunk = 0; chunk < d / 8; ++chunk) {
      const Bf16x8 word = key[chunk];
      float k[8];
      for (int p = 0; p < 4; ++p) {
        const float2 pair = __bfloat1622float2(word.v[p]);
        k[2 * p] = pair.x;
        k[2 * p + 1] = pair.y;
      }
#pragma unroll
      for (int a = 0; a < kMaxGroup; ++a) {
        if (a >= group) break;
        const float* qa = s_q + a * d + chunk * 8;
        for (int t = 0; t < 8; ++t) sum[a] = __fmaf_rn(qa[t], k[t], sum[a]);
      }
    }
  }
#pragma unroll
  for (int a = 0; a < kMaxGroup; ++a) {
    if (a >= group) break;
    const int64_t list = int64_t(b) * args.n_query_heads + int64_t(h) * group + a;
    args.scores[list * args.score_stride + j] = j < length ? sum[a] : -INFINITY;
  }
}

}  // namespace

QueryKeyScoresArgs decode_step_scores(const DecodeAttentionArgs& attention,
                                      const __nv_bfloat16* keys, int64_t key_slot_stride, int width,
                                      float* scores, int64_t score_stride) {
  QueryKeyScoresArgs args;
  args.q = attention.q;
  args.q_seq_stride = attention.q_seq_stride;
  args.keys = keys;
  args.key_slot_stride = key_slot_stride;
  args.batch = attention.batch;
  args.n_query_heads = attention.n_query_heads;
  args.n_kv_heads = attention.n_kv_heads;
  args.head_dim = attention.head_dim;
  args.lengths = attention.kv_length;
  args.width = width;
  args.scores = scores;
  args.score_stride = score_stride;
  return args;
}

void query_key_scores(const QueryKeyScoresArgs& args, cudaStream_t stream) {
  const int group = args.n_kv_heads > 0 ? args.n_query_heads / args.n_kv_heads : 0;
  if (group < 1 || group > kMaxGroup || group * args.n_kv_heads != args.n_query_heads)
    throw std::invalid_argument("query_key_scores: needs Hq = g * Hkv with g <= 16, got " +
                                std::to_string(args.n_query_heads) + " / " +
                                std::to_string(args.n_kv_heads));
  if (args.head_dim < 8 || args.head_dim % 8 != 0 || args.head_dim > kMaxHeadDim)
    throw std::invalid_argument(
        "query_key_scores: head_dim must be a multiple of 8 up to 256, got " +
        std::to_string(args.head_dim));
  if (args.batch < 1 || args.width < 1) return;
  const dim3 grid((args.width + kThreads - 1) / kThreads, args.batch * args.n_kv_heads);
  launch_overlapped(query_key_scores_kernel, grid, dim3(kThreads), 0, stream, "query_key_scores",
                    args);
}

}  // namespace kvb::cuda
