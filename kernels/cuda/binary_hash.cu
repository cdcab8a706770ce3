// BinaryPC kernels: Algorithm 2 hashing, query packing, bit-plane scoring. Contracts and the
// pipeline: kernels/cuda/binary_hash.h; CPU twin: kernels/cpu/binary_hash.cc.
#include <cuda_bf16.h>

#include <stdexcept>

#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"

namespace kvb::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kHashThreads = 256;
constexpr int kLanesPerKey = 8;  // one key per 8 lanes; lane l owns dimensions l, l+8, l+16, ...
constexpr int kKeysPerBlock = kHashThreads / kLanesPerKey;

template <int D, bool kErrors>
__global__ void __launch_bounds__(kHashThreads) hash_keys_kernel(BinaryHashKeysArgs args) {
  constexpr int E = D / kLanesPerKey;
  __shared__ float s_projection[kBinaryPcBits * D];
  const int slot = blockIdx.y;
  const float* projection = args.projection + int64_t(slot) * kBinaryPcBits * D;
  for (int i = threadIdx.x; i < kBinaryPcBits * D; i += kHashThreads)
    s_projection[i] = projection[i];
  __syncthreads();

  const int lane = threadIdx.x % kLanesPerKey;
  const int token = args.begin + blockIdx.x * kKeysPerBlock + threadIdx.x / kLanesPerKey;
  const bool live = token < args.end;
  const __nv_bfloat16* key = args.keys + slot * args.key_slot_stride + int64_t(token) * D;
  float r[E];
#pragma unroll
  for (int e = 0; e < E; ++e) r[e] = live ? __bfloat162float(key[lane + kLanesPerKey * e]) : 0.f;
  double reconstruction[kErrors ? E : 1];
#pragma unroll
  for (int e = 0; e < (kErrors ? E : 1); ++e) reconstruction[e] = 0.0;

  uint64_t code = 0;
  for (int i = 0; i < kBinaryPcBits; ++i) {
    const float* row = s_projection + i * D;
    float dot = 0.f, magnitude = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float product = r[e] * row[lane + kLanesPerKey * e];
      dot += product;
      magnitude += fabsf(product);
    }
#pragma unroll
    for (int off = kLanesPerKey / 2; off > 0; off /= 2) {
      dot += __shfl_xor_sync(kFullMask, dot, off);
      magnitude += __shfl_xor_sync(kFullMask, magnitude, off);
    }
    bool negative = dot < 0.f, nonzero = dot != 0.f;
    // f32 summation error stays below ~20 ulp of the sum of |products|; inside that margin the
    // sign is decided again from exact f64 products (f32 x f32 is exact in f64), like the CPU.
    const bool ambiguous = fabsf(dot) <= 1e-5f * magnitude;
    if (__any_sync(kFullMask, ambiguous)) {
      double exact = 0.0;
#pragma unroll
      for (int e = 0; e < E; ++e) exact += double(r[e]) * double(row[lane + kLanesPerKey * e]);
#pragma unroll
      for (int off = kLanesPerKey / 2; off > 0; off /= 2)
        exact += __shfl_xor_sync(kFullMask, exact, off);
      if (ambiguous) {
        negative = exact < 0.0;
        nonzero = exact != 0.0;
      }
    }
    if (negative) code |= uint64_t{1} << i;
    if (nonzero) {
#pragma unroll
      for (int e = 0; e < E; ++e)
        r[e] = negative ? r[e] + row[lane + kLanesPerKey * e] : r[e] - row[lane + kLanesPerKey * e];
    }
    if constexpr (kErrors) {
      const double h = negative ? -1.0 : 1.0;  // decoded from the bit: a zero product counts as +1
#pragma unroll
      for (int e = 0; e < E; ++e) reconstruction[e] += h * double(row[lane + kLanesPerKey * e]);
    }
  }
  float error = 0.f;
  if constexpr (kErrors) {
    double squares = 0.0;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const double original = live ? double(__bfloat162float(key[lane + kLanesPerKey * e])) : 0.0;
      const double diff = original - reconstruction[e];
      squares += diff * diff;
    }
#pragma unroll
    for (int off = kLanesPerKey / 2; off > 0; off /= 2)
      squares += __shfl_xor_sync(kFullMask, squares, off);
    error = static_cast<float>(sqrt(squares));
  }
  if (live && lane == 0) {
    args.codes[slot * args.code_slot_stride + token] = code;
    if constexpr (kErrors) args.reconstruction_error[slot * args.code_slot_stride + token] = error;
  }
}

constexpr int kPackBatch = 8;

template <int D>
__global__ void pack_queries_kernel(BinaryPackQueriesArgs args) {
  extern __shared__ float smem[];
  float* s_projection = smem;                   // [64][D + 1]: no bank conflicts per bit
  float* s_q = smem + kBinaryPcBits * (D + 1);  // [group][D]
  __shared__ float s_warp_max[32];
  const int slot = blockIdx.x;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  const int group = args.n_query_heads / args.n_kv_heads;
  // All loads of P issued before any store: one memory round trip instead of one per element
  // (this kernel is latency-bound; P is usually cold in L2 at a decode step).
  const float4* projection =
      reinterpret_cast<const float4*>(args.projection + int64_t(slot) * kBinaryPcBits * D);
  constexpr int kVectors = kBinaryPcBits * D / 4;
  for (int base = 0; base < kVectors; base += kPackBatch * blockDim.x) {
    float4 batch[kPackBatch];
#pragma unroll
    for (int u = 0; u < kPackBatch; ++u) {
      const int i = base + u * blockDim.x + threadIdx.x;
      if (i < kVectors) batch[u] = __ldg(projection + i);
    }
#pragma unroll
    for (int u = 0; u < kPackBatch; ++u) {
      const int i = base + u * blockDim.x + threadIdx.x;
      if (i >= kVectors) continue;
      float* row = s_projection + (4 * i / D) * (D + 1) + (4 * i) % D;
      row[0] = batch[u].x;
      row[1] = batch[u].y;
      row[2] = batch[u].z;
      row[3] = batch[u].w;
    }
  }
  // P is written once before the decode steps, so it is loaded above while the previous kernel
  // (launched with launch_overlapped) may still run; the queries are its output.
  wait_for_predecessor();
  // After the wait, so that the scores' early code loads never overlap an earlier kernel.
  allow_successor_launch();
  const __nv_bfloat16* q = args.q + b * args.q_seq_stride + int64_t(h) * group * D;
  for (int i = threadIdx.x; i < group * D; i += blockDim.x) s_q[i] = __bfloat162float(q[i]);
  __syncthreads();

  const int head = threadIdx.x / kBinaryPcBits, bit = threadIdx.x % kBinaryPcBits;
  // Sequential f64 sum of exact products: the CPU reference's order, so p is the same float.
  double sum = 0.0;
  for (int t = 0; t < D; ++t)
    sum += double(s_q[head * D + t]) * double(s_projection[bit * (D + 1) + t]);
  const float p = static_cast<float>(sum);

  float largest = fabsf(p);
  for (int off = 16; off > 0; off /= 2)
    largest = fmaxf(largest, __shfl_xor_sync(kFullMask, largest, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s_warp_max[warp] = largest;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) m = fmaxf(m, s_warp_max[w]);
    s_warp_max[0] = m;
  }
  __syncthreads();
  const float scale = __fdiv_rn(127.f, fmaxf(s_warp_max[0], 1e-6f));  // the PyTorch path's clamp
  const int value =
      max(-127, min(127, static_cast<int>(rintf(__fmul_rn(p, scale)))));  // half to even
  const int magnitude = value < 0 ? -value : value;

  uint32_t* out = reinterpret_cast<uint32_t*>(
      args.planes + (int64_t(b) * args.n_query_heads + h * group + head) * kBinaryPcPlanes);
  const int half = bit / 32;  // low or high 32 bits of each little-endian 64-bit plane
  const unsigned sign = __ballot_sync(kFullMask, value < 0);
  if (lane == 0) out[half] = sign;
#pragma unroll
  for (int m = 1; m < kBinaryPcPlanes; ++m) {
    const unsigned plane = __ballot_sync(kFullMask, (magnitude >> (m - 1)) & 1);
    if (lane == 0) out[2 * m + half] = plane;
  }
}

constexpr int kScoreThreads = 256;
constexpr int kScoreTokensPerThread = 8;

template <int G>
__global__ void __launch_bounds__(kScoreThreads) score_keys_kernel(BinaryScoreKeysArgs args) {
  const int slot = blockIdx.y;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  // Codes and the EAS mask are fixed during decoding: loaded before waiting for the planes.
  const uint64_t* codes = args.codes + slot * args.code_slot_stride;
  const uint32_t* mask =
      args.forced_mask ? args.forced_mask + slot * args.mask_slot_stride : nullptr;
  const int first = blockIdx.x * kScoreThreads * kScoreTokensPerThread + threadIdx.x;
  uint64_t code[kScoreTokensPerThread];
  bool forced[kScoreTokensPerThread];
#pragma unroll
  for (int t = 0; t < kScoreTokensPerThread; ++t) {
    const int j = first + t * kScoreThreads;
    code[t] = j < args.length ? codes[j] : 0;
    forced[t] =
        j < args.sink_tokens || (mask && j < args.length && ((mask[j / 32] >> (j % 32)) & 1u));
  }
  wait_for_predecessor();
  allow_successor_launch();
  const uint64_t* planes =
      args.planes + (int64_t(b) * args.n_query_heads + h * G) * kBinaryPcPlanes;
  uint64_t sign[G], magnitude[G][kBinaryPcPlanes - 1];
  int base[G];  // sum_m popc(m_m) 2^(m-1): the score when no product is negative
#pragma unroll
  for (int a = 0; a < G; ++a) {
    sign[a] = planes[a * kBinaryPcPlanes];
    base[a] = 0;
#pragma unroll
    for (int m = 1; m < kBinaryPcPlanes; ++m) {
      magnitude[a][m - 1] = planes[a * kBinaryPcPlanes + m];
      base[a] += __popcll(magnitude[a][m - 1]) << (m - 1);
    }
  }
  uint16_t* keys = args.keys + slot * args.key_slot_stride;
#pragma unroll
  for (int t = 0; t < kScoreTokensPerThread; ++t) {
    const int j = first + t * kScoreThreads;
    if (j >= args.length) break;
    int best = -(1 << 30);
#pragma unroll
    for (int a = 0; a < G; ++a) {
      const uint64_t negative = sign[a] ^ code[t];  // p^_i h_i < 0
      int lost = 0;
#pragma unroll
      for (int m = 0; m < kBinaryPcPlanes - 1; ++m)
        lost += __popcll(magnitude[a][m] & negative) << m;
      best = max(best, base[a] - 2 * lost);
    }
    keys[j] = forced[t] ? kBinaryPcForced : static_cast<uint16_t>(best + kBinaryPcScoreOffset);
  }
}

__global__ void mark_tokens_kernel(const int32_t* indices, int64_t index_stride, int count,
                                   uint32_t* mask, int64_t mask_slot_stride) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= count) return;
  const int j = indices[blockIdx.y * index_stride + n];
  atomicOr(mask + blockIdx.y * mask_slot_stride + j / 32, 1u << (j % 32));
}

template <int D>
void launch_hash(const BinaryHashKeysArgs& args, cudaStream_t stream) {
  const dim3 grid((args.end - args.begin + kKeysPerBlock - 1) / kKeysPerBlock, args.n_slots);
  if (args.reconstruction_error)
    hash_keys_kernel<D, true><<<grid, kHashThreads, 0, stream>>>(args);
  else
    hash_keys_kernel<D, false><<<grid, kHashThreads, 0, stream>>>(args);
}

template <int G>
void launch_score(const BinaryScoreKeysArgs& args, cudaStream_t stream) {
  const int per_block = kScoreThreads * kScoreTokensPerThread;
  const dim3 grid((args.length + per_block - 1) / per_block, args.batch * args.n_kv_heads);
  launch_overlapped(score_keys_kernel<G>, grid, kScoreThreads, 0, stream, "score_keys_kernel",
                    args);
}

}  // namespace

void binary_hash_keys(const BinaryHashKeysArgs& args, cudaStream_t stream) {
  if (args.end <= args.begin || args.n_slots <= 0) return;
  if (args.head_dim == 128)
    launch_hash<128>(args, stream);
  else if (args.head_dim == 64)
    launch_hash<64>(args, stream);
  else
    throw std::invalid_argument("binary_hash_keys: head_dim must be 64 or 128");
  check(cudaGetLastError(), "hash_keys_kernel launch");
}

void binary_pack_queries(const BinaryPackQueriesArgs& args, cudaStream_t stream) {
  if (args.batch <= 0) return;
  const int group = args.n_query_heads / args.n_kv_heads;
  if (group < 1 || group > 16 || group * args.n_kv_heads != args.n_query_heads)
    throw std::invalid_argument("binary_pack_queries: needs Hq = g * Hkv with g <= 16");
  const int threads = group * kBinaryPcBits;
  const size_t smem =
      (size_t(kBinaryPcBits) * (args.head_dim + 1) + size_t(group) * args.head_dim) * sizeof(float);
  const int slots = args.batch * args.n_kv_heads;
  if (args.head_dim == 128)
    launch_overlapped(pack_queries_kernel<128>, slots, threads, smem, stream, "pack_queries_kernel",
                      args);
  else if (args.head_dim == 64)
    launch_overlapped(pack_queries_kernel<64>, slots, threads, smem, stream, "pack_queries_kernel",
                      args);
  else
    throw std::invalid_argument("binary_pack_queries: head_dim must be 64 or 128");
  check(cudaGetLastError(), "pack_queries_kernel launch");
}

void binary_score_keys(const BinaryScoreKeysArgs& args, cudaStream_t stream) {
  if (args.length <= 0 || args.batch <= 0) return;
  switch (args.n_query_heads / args.n_kv_heads) {
    case 1:
      launch_score<1>(args, stream);
      break;
    case 2:
      launch_score<2>(args, stream);
      break;
    case 3:
      launch_score<3>(args, stream);
      break;
    case 4:
      launch_score<4>(args, stream);
      break;
    case 5:
      launch_score<5>(args, stream);
      break;
    case 6:
      launch_score<6>(args, stream);
      break;
    case 7:
      launch_score<7>(args, stream);
      break;
    case 8:
      launch_score<8>(args, stream);
      break;
    default:
      throw std::invalid_argument("binary_score_keys: GQA group must be 1..8");
  }
  check(cudaGetLastError(), "score_keys_kernel launch");
}

void binary_mark_tokens(const int32_t* indices, int64_t index_stride, int n_slots, int count,
                        uint32_t* mask, int64_t mask_slot_stride, cudaStream_t stream) {
  if (count <= 0 || n_slots <= 0) return;
  const dim3 grid((count + 255) / 256, n_slots);
  mark_tokens_kernel<<<grid, 256, 0, stream>>>(indices, index_stride, count, mask,
                                               mask_slot_stride);
  check(cudaGetLastError(), "mark_tokens_kernel launch");
}

}  // namespace kvb::cuda
