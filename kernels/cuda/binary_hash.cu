// BinaryPC kernels: Algorithm 2 hashing, bit-plane scoring with the query packing folded in.
// Contracts and the pipeline: kernels/cuda/binary_hash.h; CPU twin: kernels/cpu/binary_hash.cc.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"

namespace kvb::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kHashThreads = 256;
constexpr int kLanesPerKey = 8;  // one key per 8 lanes; lane l owns dimensions l, l+8, l+16, ...
constexpr int kKeysPerBlock = kHashThreads / kLanesPerKey;

template <int D, bool kErrors>
__global__ void __launch_bounds__(kHashThreads) hash_keys_kernel(BinaryHashKeysArgs args) {
  constexpr int E = D / kLanesPerKey;
  __shared__ float s_projection[kSignCodeBits * D];
  const int slot = blockIdx.y;
  const float* projection = args.projection + int64_t(slot) * kSignCodeBits * D;
  for (int i = threadIdx.x; i < kSignCodeBits * D; i += kHashThreads)
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
  for (int i = 0; i < kSignCodeBits; ++i) {
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

// Scoring on the int8 tensor cores. With h = 1 - 2b (b: the code's bits),
//   score_a(j) = sum_i p^_{a,i} h_{j,i} = S_a - 2 sum_i p^_{a,i} b_{j,i},   S_a = sum_i p^_{a,i},
// a product of 0/1 bytes with the quantised query (|p^| <= 127), exact in int32: the integers of
// the CPU twin's popcount form. That form took 14 POPC per key and head, a quarter-rate
// instruction on sm_90, and ran several times longer than reading the codes; this one is bound by
// the integer ALU that builds the A fragments (measured: results/gpu-kernel-tuning.md §5.1).
// An m16n8k32 takes 16 keys as rows and the group's query heads as columns; two cover 64 bits.
// The order of k is free as long as A and B agree: byte i of lane t's a0 is code bit 8i + t (of
// a2, bit 8i + t + 4), so every A register is one shift and one AND of a code word.
// Each block walks batches of kScoreKeysPerBlock keys (the grid is one wave of resident blocks),
// loading the next batch's codes while it scores the current one.
// Tried and dropped: rows g / g + 8 as keys 2g / 2g + 1 with both biased scores packed in one
// register (16x2 max, one 32-bit store per pair): more instructions, slower (§5.2 there).
constexpr int kScoreWarps = 8;
constexpr int kScoreTilesPerWarp = 8;  // 16-key row tiles per warp and batch
constexpr int kScoreKeysPerBlock = kScoreWarps * kScoreTilesPerWarp * 16;

__device__ __forceinline__ uint32_t bit_bytes(uint32_t word, int shift) {
  return (word >> shift) & 0x01010101u;
}

// B fragments of the group in shared memory: the word of (head a, code half w, k half, lane t)
// holds p^ at bits 32w + 8i + t + 4 half in its bytes i; and each head's S in two halves.
constexpr int kMaxScoreGroup = 8;
struct ScoreQueries {
  uint32_t words[kMaxScoreGroup * 2 * 2 * 4];
  int half_totals[kMaxScoreGroup * 2];
};

// The query side: every score block derives its slot's quantised queries from q and P itself
// (kernels/cpu/binary_hash.cc's binary_pack_queries, bit for bit) instead of reading them from a
// kernel of their own: that kernel cost a launch boundary per layer (its grid of one block per
// slot, its drain, the PDL wait behind it; its column in results/gpu-sparse-decode.md), where this
// prologue is a few L2 reads and a short computation. The copy of P (L2 reads) is issued before
// the PDL wait; after it come q's load and 64 x G chains of d dependent f64 multiply-adds, which
// keep the CPU's summation order and so give p as the same float.
// Thread (bit i, heads 4s .. 4s + 3) of the first 64 ceil(G / 4) threads runs the chains of its
// bit and converts each element of P[i] to f64 once for up to four heads. Spreading the heads over
// all the block's threads would shorten no chain and would convert every element (a slower
// instruction than the multiply-add) and read it from shared memory once per head.
template <int D, int G>
struct QueryStage {
  static constexpr int kHeadSets = (G + 3) / 4;  // one thread per bit and set of four heads
  static constexpr int kHeadsPerThread = G < 4 ? G : 4;
  static constexpr int kRow = 4 * kHeadSets;        // q's heads per dimension, zero from G on
  alignas(16) float projection[kSignCodeBits * D];  // at projection_chunk
  alignas(16) double q[D * kRow];                   // [t][a]
  float largest[2 * kHeadSets];                     // max |p| of each projecting warp
};

// Row i's 16-byte chunk c is stored as chunk c ^ (i % 8) of the row, so that the eight rows of a
// quarter warp reading chunk c at once touch eight different groups of four banks.
template <int D>
__device__ __forceinline__ int projection_chunk(int row, int chunk) {
  return row * D + ((chunk ^ (row % 8)) << 2);
}

template <int D, int G>
__device__ __forceinline__ void copy_projection(const float* projection, QueryStage<D, G>& stage) {
  constexpr int kChunksPerRow = D / 4;
  for (int n = threadIdx.x; n < kSignCodeBits * kChunksPerRow; n += kScoreWarps * 32)
    cp_async_16(stage.projection + projection_chunk<D>(n / kChunksPerRow, n % kChunksPerRow),
                projection + 4 * n, true);
  cp_async_commit();
}

// p = P[bit] . q_a of heads first .. first + kHeadsPerThread - 1: f64 sums of exact products
// (f32 x bf16 fits a double's significand, so a fused multiply-add rounds as a multiply and an
// add) in index order, as the CPU twin's exact_dot.
template <int D, int G>
__device__ __forceinline__ void project(const QueryStage<D, G>& stage, int bit, int first,
                                        float (&p)[QueryStage<D, G>::kHeadsPerThread]) {
  using Stage = QueryStage<D, G>;
  double sum[Stage::kHeadsPerThread];
#pragma unroll
  for (int a = 0; a < Stage::kHeadsPerThread; ++a) sum[a] = 0.0;
#pragma unroll 2
  for (int chunk = 0; chunk < D / 4; ++chunk) {
    const float4 row =
        *reinterpret_cast<const float4*>(stage.projection + projection_chunk<D>(bit, chunk));
    const float values[4] = {row.x, row.y, row.z, row.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const double* q = stage.q + (4 * chunk + u) * Stage::kRow + first;
#pragma unroll
      for (int a = 0; a < Stage::kHeadsPerThread; ++a) sum[a] += q[a] * double(values[u]);
    }
  }
#pragma unroll
  for (int a = 0; a < Stage::kHeadsPerThread; ++a) p[a] = static_cast<float>(sum[a]);
}

// Algorithm 3 step 2 as the PyTorch path and the CPU twin's quantize_query_group: one scale
// 127 / max|p| per group (the maximum clamped to >= 1e-6), p * scale rounded half to even and
// clamped to [-127, 127].
__device__ __forceinline__ float query_scale(float group_largest) {
  return __fdiv_rn(127.f, fmaxf(group_largest, 1e-6f));
}
__device__ __forceinline__ int quantize_projected(float p, float scale) {
  return max(-127, min(127, static_cast<int>(rintf(__fmul_rn(p, scale)))));
}

// p^ of (head a, bit) into its byte of the B fragments; S's halves summed over the warp, which
// holds 32 bits of head a.
__device__ __forceinline__ void stage_query_value(ScoreQueries& out, int a, int bit, int value) {
  const int w = bit / 32, r = bit % 32;
  const int word = ((a * 2 + w) * 2 + (r % 8) / 4) * 4 + r % 4;
  reinterpret_cast<int8_t*>(out.words)[word * 4 + r / 8] = static_cast<int8_t>(value);
  const int sum = __reduce_add_sync(kFullMask, value);
  if (r == 0) out.half_totals[a * 2 + w] = sum;
}

// After the wait: the group's queries (q: [G, D] bf16), their projections, the group's largest
// |p| (warp shuffles, then one value per projecting warp), the B fragments.
template <int D, int G>
__device__ void stage_queries(const __nv_bfloat16* q, QueryStage<D, G>& stage, ScoreQueries& out) {
  using Stage = QueryStage<D, G>;
  for (int n = threadIdx.x; n < Stage::kRow * D; n += kScoreWarps * 32) {
    const int a = n / D;
    stage.q[(n % D) * Stage::kRow + a] = a < G ? double(__bfloat162float(q[n])) : 0.0;
  }
  cp_async_wait<0>();  // this thread's chunks of P
  __syncthreads();
  const bool projecting = threadIdx.x < kSignCodeBits * Stage::kHeadSets;  // whole warps
  const int bit = threadIdx.x % kSignCodeBits, first = 4 * (threadIdx.x / kSignCodeBits);
  float p[Stage::kHeadsPerThread];
  if (projecting) {
    project<D, G>(stage, bit, first, p);
    float largest = 0.f;  // heads past G project to 0
#pragma unroll
    for (int a = 0; a < Stage::kHeadsPerThread; ++a) largest = fmaxf(largest, fabsf(p[a]));
    for (int off = 16; off > 0; off /= 2)
      largest = fmaxf(largest, __shfl_xor_sync(kFullMask, largest, off));
    if (threadIdx.x % 32 == 0) stage.largest[threadIdx.x / 32] = largest;
  }
  __syncthreads();
  if (projecting) {
    float largest = 0.f;
    for (int w = 0; w < 2 * Stage::kHeadSets; ++w) largest = fmaxf(largest, stage.largest[w]);
    const float scale = query_scale(largest);
#pragma unroll
    for (int a = 0; a < Stage::kHeadsPerThread; ++a)
      if (first + a < G) stage_query_value(out, first + a, bit, quantize_projected(p[a], scale));
  }
  __syncthreads();
}

// One warp's share of a batch: tile r holds keys first + 16 r (row g) and + 8 (row g + 8); lanes
// t = 0 and 1 of each quad write those two, and `forced` bit r says whether this lane's is forced.
struct WarpCodes {
  uint2 code[kScoreTilesPerWarp][2];
  uint32_t forced;
};

// kChecked: some keys of the batch lie past the length (the last batch); the others need no test.
template <bool kChecked>
__device__ __forceinline__ WarpCodes load_codes(const BinaryScoreKeysArgs& args, const uint2* codes,
                                                const uint32_t* mask, int first, int t) {
  WarpCodes out;
  out.forced = 0;
#pragma unroll
  for (int r = 0; r < kScoreTilesPerWarp; ++r) {
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      const int j = first + 16 * r + 8 * row;
      out.code[r][row] = !kChecked || j < args.length ? codes[j] : make_uint2(0, 0);
    }
    const int mine = first + 16 * r + 8 * (t & 1);
    const uint32_t word = mask && (!kChecked || mine < args.length) ? mask[mine / 32] : 0u;
    out.forced |= (((word >> (mine % 32)) & 1u) | uint32_t(mine < args.sink_tokens)) << r;
  }
  return out;
}

__device__ __forceinline__ WarpCodes load_batch(const BinaryScoreKeysArgs& args, const uint2* codes,
                                                const uint32_t* mask, int batch, int warp_offset,
                                                int t) {
  const int first = batch * kScoreKeysPerBlock + warp_offset;
  return (batch + 1) * kScoreKeysPerBlock <= args.length
             ? load_codes<false>(args, codes, mask, first, t)
             : load_codes<true>(args, codes, mask, first, t);
}

// The query side of one lane: B fragments (b0, b1 for the low code word, then the high one) and S
// of accumulator columns 2t and 2t + 1 (a column past the group gets a total that never wins).
struct LaneQueries {
  uint32_t b[4];
  int total[2];
};

template <int G>
__device__ __forceinline__ LaneQueries lane_queries(const ScoreQueries& queries, int g, int t) {
  LaneQueries out;
#pragma unroll
  for (int i = 0; i < 4; ++i) out.b[i] = g < G ? queries.words[(g * 4 + i) * 4 + t] : 0u;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int a = 2 * t + c;
    out.total[c] =
        a < G ? queries.half_totals[2 * a] + queries.half_totals[2 * a + 1] : INT_MIN / 4;
  }
  return out;
}

template <int G>
__device__ __forceinline__ void score_tiles(const BinaryScoreKeysArgs& args, const WarpCodes& in,
                                            const LaneQueries& q, int first, int t,
                                            uint16_t* keys) {
#pragma unroll
  for (int r = 0; r < kScoreTilesPerWarp; ++r) {
    int acc[4] = {0, 0, 0, 0};
    const uint2 top = in.code[r][0], bottom = in.code[r][1];
    mma_s8(acc, bit_bytes(top.x, t), bit_bytes(bottom.x, t), bit_bytes(top.x, t + 4),
           bit_bytes(bottom.x, t + 4), q.b[0], q.b[1]);
    mma_s8(acc, bit_bytes(top.y, t), bit_bytes(bottom.y, t), bit_bytes(top.y, t + 4),
           bit_bytes(bottom.y, t + 4), q.b[2], q.b[3]);
    int best[2];  // rows g and g + 8
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      best[row] = max(q.total[0] - 2 * acc[2 * row], q.total[1] - 2 * acc[2 * row + 1]);
      best[row] = max(best[row], __shfl_xor_sync(kFullMask, best[row], 1));
      if constexpr (G > 4) best[row] = max(best[row], __shfl_xor_sync(kFullMask, best[row], 2));
    }
    const int j = first + 16 * r + 8 * t;
    if (t < 2 && j < args.length)
      keys[j] = (in.forced >> r) & 1u
                    ? kSignCodeForced
                    : static_cast<uint16_t>((t == 0 ? best[0] : best[1]) + kSignCodeScoreOffset);
  }
}

template <int D, int G>
__global__ void __launch_bounds__(kScoreWarps * 32) score_keys_kernel(BinaryScoreKeysArgs args) {
  __shared__ QueryStage<D, G> stage;
  __shared__ ScoreQueries queries;
  const int slot = blockIdx.y;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warp_offset = (threadIdx.x / 32) * kScoreTilesPerWarp * 16 + g;
  const int batches = (args.length + kScoreKeysPerBlock - 1) / kScoreKeysPerBlock;
  // P, the codes and the EAS mask are fixed during decoding: loaded before waiting for the queries.
  copy_projection<D, G>(args.projection + int64_t(slot) * kSignCodeBits * D, stage);
  const uint2* codes = reinterpret_cast<const uint2*>(args.codes + slot * args.code_slot_stride);
  const uint32_t* mask =
      args.forced_mask ? args.forced_mask + slot * args.mask_slot_stride : nullptr;
  WarpCodes current = load_batch(args, codes, mask, blockIdx.x, warp_offset, t);
  wait_for_predecessor();
  allow_successor_launch();
  stage_queries<D, G>(args.q + b * args.q_seq_stride + int64_t(h) * G * D, stage, queries);
  const LaneQueries q = lane_queries<G>(queries, g, t);
  uint16_t* keys = args.keys + slot * args.key_slot_stride;
  for (int batch = blockIdx.x; batch < batches; batch += gridDim.x) {
    WarpCodes upcoming;
    if (batch + gridDim.x < batches)
      upcoming = load_batch(args, codes, mask, batch + gridDim.x, warp_offset, t);
    score_tiles<G>(args, current, q, batch * kScoreKeysPerBlock + warp_offset, t, keys);
    current = upcoming;
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

template <int D, int G>
void launch_score(const BinaryScoreKeysArgs& args, cudaStream_t stream) {
  static thread_local const int resident =
      resident_blocks_per_sm(score_keys_kernel<D, G>, kScoreWarps * 32, 0, "score_keys_kernel") *
      device_info().sm_count;
  const int slots = args.batch * args.n_kv_heads;
  const int batches = (args.length + kScoreKeysPerBlock - 1) / kScoreKeysPerBlock;
  const dim3 grid(std::min(batches, std::max(1, resident / slots)), slots);
  launch_overlapped(score_keys_kernel<D, G>, grid, kScoreWarps * 32, 0, stream, "score_keys_kernel",
                    args);
}

// The kernel of GQA group `group` (G .. kMaxScoreGroup) at head dimension D.
template <int D, int G = 1>
void launch_score_for_group(const BinaryScoreKeysArgs& args, int group, cudaStream_t stream) {
  if constexpr (G <= kMaxScoreGroup) {
    if (group == G)
      launch_score<D, G>(args, stream);
    else
      launch_score_for_group<D, G + 1>(args, group, stream);
  }
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

void binary_score_keys(const BinaryScoreKeysArgs& args, cudaStream_t stream) {
  if (args.length <= 0 || args.batch <= 0) return;
  const int group = args.n_kv_heads > 0 ? args.n_query_heads / args.n_kv_heads : 0;
  if (group < 1 || group > kMaxScoreGroup || group * args.n_kv_heads != args.n_query_heads)
    throw std::invalid_argument("binary_score_keys: needs Hq = g * Hkv with a GQA group g of 1..8");
  if (args.head_dim == 128)
    launch_score_for_group<128>(args, group, stream);
  else if (args.head_dim == 64)
    launch_score_for_group<64>(args, group, stream);
  else
    throw std::invalid_argument("binary_score_keys: head_dim must be 64 or 128");
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
