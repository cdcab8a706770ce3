// BinaryPC kernels: Algorithm 2 hashing, bit-plane scoring with the query packing folded in.
// Contracts and the pipeline: kernels/cuda/binary_hash.h; CPU twin: kernels/cpu/binary_hash.cc.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
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
// a product of code bits with the quantised query (|p^| <= 127), exact in int32: the integers of
// the CPU twin's popcount form, which took 14 POPC per key and head, a quarter-rate instruction on
// sm_90 (results/gpu-kernel-tuning.md §5.1). An m16n8k32 takes 16 keys as rows and the group's
// query heads as columns; two cover 64 bits. The order of k is free as long as A and B agree: byte
// i of lane t's a0 is code bit 8i + t (of a2, bit 8i + t + 4).
//
// The work: one block of kScoreWarps warps per SM (a one-wave grid), so the query side below, the
// same for every block of a slot, runs once per SM rather than once per resident block. Each warp
// streams its own stages of kStageKeys keys through a ring of kScoreStages in shared memory
// (cp.async in 16-byte chunks, or 8 on a row that starts 8 bytes off): the bytes in flight are set
// by the ring depth, not by registers, each code crosses from memory once, and a quad's four lanes
// read their tile row pair with one 16-byte shared load. The first kScoreStages - 1 stages are
// requested before the PDL wait, so they arrive while the queries are projected. A stage's keys
// are staged in shared memory and leave as 16-byte stores. These choices await measurement on the
// GPU (results/gpu-kernel-tuning.md §5 has the figures of the kernel they replace).
// Tried and dropped earlier: both rows' biased scores packed in one register for a 32-bit global
// store per pair: more instructions (§5.2 there).
constexpr int kScoreWarps = 16;
constexpr int kScoreThreads = kScoreWarps * 32;
constexpr int kStageKeys = 128;  // keys per warp and stage: 8 tiles of 16
constexpr int kStageTiles = kStageKeys / 16;
constexpr int kStageWords = kStageKeys / 32;  // forced-mask words per stage
constexpr int kScoreStages = 6;               // 5 stages in flight while one is scored
constexpr int kBlockStageKeys = kScoreWarps * kStageKeys;
constexpr int kKeyShiftSlack = 8;  // a key row's start may sit up to 7 keys past a 16-byte line
constexpr int kMaxScoreGroup = 8;

// B fragments of the group in shared memory: the word of (head a, code half w, k half, lane t)
// holds p^ at bits 32w + 8i + t + 4 half in its bytes i; and each head's S in two halves.
struct ScoreQueries {
  uint32_t words[kMaxScoreGroup * 2 * 2 * 4];
  int half_totals[kMaxScoreGroup * 2];
};

// Everything a score block keeps in shared memory (dynamic: ~175 KB at D = 128).
// The query side: thread (bit i, heads 2s, 2s + 1) of the first 64 ceil(G / 2) threads runs the
// f64 chains of its bit; P is converted to f64 once per block, by all threads, so the chains read
// no f32 and each P element is converted once rather than once per head set.
template <int D, int G>
struct ScoreShared {
  static constexpr int kHeadSets = (G + 1) / 2;
  static constexpr int kHeadsPerThread = G < 2 ? G : 2;
  static constexpr int kRow = 2 * kHeadSets;  // q's heads per dimension, zero from G on
  static constexpr int kProjectingWarps = 2 * kHeadSets;
  alignas(16) double projection[kSignCodeBits * D];  // at projection_pair
  alignas(16) double q[D * kRow];                    // [t][a]
  alignas(16) uint4 codes[kScoreWarps][kScoreStages][kStageKeys / 2];
  alignas(16) uint32_t forced[kScoreWarps][kScoreStages][kStageWords];
  alignas(16) uint16_t keys[kScoreWarps][kStageKeys + kKeyShiftSlack];
  float largest[kProjectingWarps];  // max |p| of each projecting warp
  ScoreQueries queries;
};

// P's 64 x D floats as D / 32 float4 per thread, loaded before the PDL wait (P is written before
// decoding starts) and converted after it while the queries are in flight.
template <int D>
struct ProjectionSlice {
  static constexpr int kVectors = kSignCodeBits * D / 4 / kScoreThreads;
  float4 v[kVectors];
};

template <int D>
__device__ __forceinline__ ProjectionSlice<D> load_projection(const float* projection) {
  ProjectionSlice<D> slice;
  const float4* vectors = reinterpret_cast<const float4*>(projection);
#pragma unroll
  for (int i = 0; i < ProjectionSlice<D>::kVectors; ++i)
    slice.v[i] = vectors[threadIdx.x + i * kScoreThreads];
  return slice;
}

// Row i's 16-byte pair c (dimensions 2c, 2c + 1) is stored as pair c ^ (i % 8) of the row, so
// that the eight rows of a quarter warp reading pair c at once touch eight different groups of
// four banks.
template <int D>
__device__ __forceinline__ int projection_pair(int row, int pair) {
  return row * D + ((pair ^ (row % 8)) << 1);
}

// f32 -> f64 is exact, so P in f64 holds the values the CPU twin promotes.
template <int D, int G>
__device__ __forceinline__ void store_projection(const ProjectionSlice<D>& slice,
                                                 ScoreShared<D, G>& shared) {
  constexpr int kVectorsPerRow = D / 4;
#pragma unroll
  for (int i = 0; i < ProjectionSlice<D>::kVectors; ++i) {
    const int n = threadIdx.x + i * kScoreThreads;
    const int row = n / kVectorsPerRow, pair = 2 * (n % kVectorsPerRow);
    const float4 v = slice.v[i];
    *reinterpret_cast<double2*>(shared.projection + projection_pair<D>(row, pair)) =
        make_double2(v.x, v.y);
    *reinterpret_cast<double2*>(shared.projection + projection_pair<D>(row, pair + 1)) =
        make_double2(v.z, v.w);
  }
}

// The group's queries (G x D bf16) in chunks of 8 dimensions, chunk n = head n / (D / 8): one
// chunk per thread, as 2-byte loads (a query row need not be 16-byte aligned) issued where they
// are written (launch.cuh's load_now), so that their round trip overlaps P's conversion instead of
// following it.
struct QueryChunk {
  unsigned short bits[8];
};

template <int D, int G>
__device__ __forceinline__ QueryChunk load_query_chunk(const __nv_bfloat16* q) {
  QueryChunk chunk{};
  if (threadIdx.x < G * D / 8) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      chunk.bits[e] = load_now(reinterpret_cast<const unsigned short*>(q + 8 * threadIdx.x + e));
  }
  return chunk;
}

template <int D, int G>
__device__ __forceinline__ void store_query_chunk(const QueryChunk& chunk,
                                                  ScoreShared<D, G>& shared) {
  using Shared = ScoreShared<D, G>;
  if (threadIdx.x >= Shared::kRow * D / 8) return;
  const int a = threadIdx.x / (D / 8), first = 8 * (threadIdx.x % (D / 8));
#pragma unroll
  for (int e = 0; e < 8; ++e)
    shared.q[(first + e) * Shared::kRow + a] =
        a < G ? double(__bfloat162float(__ushort_as_bfloat16(chunk.bits[e]))) : 0.0;
}

// p = P[bit] . q_a of heads first, first + 1: f64 sums of exact products (f32 x bf16 fits a
// double's significand, so the fused multiply-add rounds as a multiply and an add) in index
// order, as the CPU twin's exact_dot.
template <int D, int G>
__device__ __forceinline__ void project(const ScoreShared<D, G>& shared, int bit, int first,
                                        float (&p)[ScoreShared<D, G>::kHeadsPerThread]) {
  using Shared = ScoreShared<D, G>;
  double sum[Shared::kHeadsPerThread];
#pragma unroll
  for (int a = 0; a < Shared::kHeadsPerThread; ++a) sum[a] = 0.0;
#pragma unroll 4
  for (int pair = 0; pair < D / 2; ++pair) {
    const double2 row =
        *reinterpret_cast<const double2*>(shared.projection + projection_pair<D>(bit, pair));
    const double* q = shared.q + 2 * pair * Shared::kRow + first;
#pragma unroll
    for (int a = 0; a < Shared::kHeadsPerThread; ++a) sum[a] = fma(q[a], row.x, sum[a]);
#pragma unroll
    for (int a = 0; a < Shared::kHeadsPerThread; ++a)
      sum[a] = fma(q[Shared::kRow + a], row.y, sum[a]);
  }
#pragma unroll
  for (int a = 0; a < Shared::kHeadsPerThread; ++a) p[a] = static_cast<float>(sum[a]);
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

// With P and q in shared memory: the projections, the group's largest |p| (warp shuffles, then one
// value per projecting warp), the B fragments.
template <int D, int G>
__device__ void stage_queries(ScoreShared<D, G>& shared) {
  using Shared = ScoreShared<D, G>;
  const bool projecting = threadIdx.x < kSignCodeBits * Shared::kHeadSets;  // whole warps
  const int bit = threadIdx.x % kSignCodeBits, first = 2 * (threadIdx.x / kSignCodeBits);
  float p[Shared::kHeadsPerThread];
  if (projecting) {
    project<D, G>(shared, bit, first, p);
    float largest = 0.f;  // heads past G project to 0
#pragma unroll
    for (int a = 0; a < Shared::kHeadsPerThread; ++a) largest = fmaxf(largest, fabsf(p[a]));
    for (int off = 16; off > 0; off /= 2)
      largest = fmaxf(largest, __shfl_xor_sync(kFullMask, largest, off));
    if (threadIdx.x % 32 == 0) shared.largest[threadIdx.x / 32] = largest;
  }
  __syncthreads();
  if (projecting) {
    float largest = 0.f;
    for (int w = 0; w < Shared::kProjectingWarps; ++w) largest = fmaxf(largest, shared.largest[w]);
    const float scale = query_scale(largest);
#pragma unroll
    for (int a = 0; a < Shared::kHeadsPerThread; ++a)
      if (first + a < G)
        stage_query_value(shared.queries, first + a, bit, quantize_projected(p[a], scale));
  }
  __syncthreads();
}

// The query side of one lane: B fragments (b0, b1 for the low code word, then the high one) and
// S + kSignCodeScoreOffset of accumulator columns 2t and 2t + 1 (a column past the group gets a
// total that never wins).
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
        a < G ? queries.half_totals[2 * a] + queries.half_totals[2 * a + 1] + kSignCodeScoreOffset
              : INT_MIN / 4;
  }
  return out;
}

// One warp's walk: stage s covers keys first_key(s) .. + kStageKeys - 1 of its slot; the grid's
// warps take consecutive stages in turn.
struct WarpStream {
  const uint64_t* codes;  // the slot's rows
  const uint32_t* mask;   // null: no forced tokens
  uint16_t* keys;
  int length, sink_tokens;
  int key_shift;       // keys from the key row's start back to a 16-byte boundary
  bool codes_aligned;  // the code row starts on a 16-byte boundary
  int warp_index, warp_count;
  __device__ int64_t first_key(int stage) const {
    return (int64_t(stage) * warp_count + warp_index) * kStageKeys;
  }
};

__device__ __forceinline__ WarpStream warp_stream(const BinaryScoreKeysArgs& args, int slot,
                                                  int warp) {
  WarpStream s;
  s.codes = args.codes + slot * args.code_slot_stride;
  s.mask = args.forced_mask ? args.forced_mask + slot * args.mask_slot_stride : nullptr;
  s.keys = args.keys + slot * args.key_slot_stride;
  s.length = args.length;
  s.sink_tokens = args.sink_tokens;
  s.key_shift = int((reinterpret_cast<uintptr_t>(s.keys) / sizeof(uint16_t)) % 8);
  s.codes_aligned = reinterpret_cast<uintptr_t>(s.codes) % 16 == 0;
  s.warp_index = blockIdx.x * kScoreWarps + warp;
  s.warp_count = gridDim.x * kScoreWarps;
  return s;
}

// One warp's share of the shared memory: its ring of stages and its staged keys.
struct WarpRing {
  uint4* codes;      // [kScoreStages][kStageKeys / 2]: keys 2c, 2c + 1 in entry c
  uint32_t* forced;  // [kScoreStages][kStageWords]
  uint16_t* keys;    // kStageKeys + kKeyShiftSlack
};

template <int D, int G>
__device__ __forceinline__ WarpRing warp_ring(ScoreShared<D, G>& shared, int warp) {
  return {shared.codes[warp][0], shared.forced[warp][0], shared.keys[warp]};
}

// Copies stage `stage`'s codes and mask words into ring entry stage % kScoreStages (zeros past
// the length; nothing past the end of the walk) and commits them as one cp.async group, empty
// or not, so that every thread counts the same groups.
__device__ __forceinline__ void request_stage(const WarpStream& s, const WarpRing& ring, int stage,
                                              int lane) {
  const int64_t first = s.first_key(stage);
  if (first < s.length) {
    const int entry = stage % kScoreStages;
    uint4* codes = ring.codes + entry * (kStageKeys / 2);
    const int left = int(min(int64_t(kStageKeys), s.length - first));
    if (s.codes_aligned) {
      for (int c = lane; c < kStageKeys / 2; c += 32) {
        const int keys = min(max(left - 2 * c, 0), 2);
        if (keys == 1) {
          // The slot's last key at an odd length: a 16-byte read would reach 8 bytes past the
          // row (compute-sanitizer memcheck flags it even with the zero-fill form), so copy its
          // 8 bytes and zero the other half.
          uint2* halves = reinterpret_cast<uint2*>(codes + c);
          cp_async_small<8>(halves, s.codes + first + 2 * c);
          cp_async_small<8>(halves + 1, s.codes, false);
        } else {
          cp_async_16(codes + c, s.codes + (keys > 0 ? first + 2 * c : 0), keys == 2);
        }
      }
    } else {
      uint2* halves = reinterpret_cast<uint2*>(codes);
      for (int k = lane; k < kStageKeys; k += 32)
        cp_async_small<8>(halves + k, s.codes + (k < left ? first + k : 0), k < left);
    }
    if (s.mask && lane < kStageWords) {
      const bool valid = 32 * lane < left;
      cp_async_small<4>(ring.forced + entry * kStageWords + lane,
                        s.mask + (valid ? first / 32 + lane : 0), valid);
    }
  }
  cp_async_commit();
}

// The stage's forced bits: the EAS mask's words, and the sinks among its keys.
__device__ __forceinline__ void stage_forced_bits(const WarpStream& s, const WarpRing& ring,
                                                  int stage, uint32_t (&bits)[kStageWords]) {
  const uint4 words =
      s.mask ? *reinterpret_cast<const uint4*>(ring.forced + (stage % kScoreStages) * kStageWords)
             : make_uint4(0, 0, 0, 0);
  bits[0] = words.x;
  bits[1] = words.y;
  bits[2] = words.z;
  bits[3] = words.w;
  const int64_t first = s.first_key(stage);
  if (first < s.sink_tokens) {
#pragma unroll
    for (int w = 0; w < kStageWords; ++w) {
      const int64_t sinks = s.sink_tokens - (first + 32 * w);
      bits[w] |= sinks >= 32 ? ~0u : sinks > 0 ? (1u << sinks) - 1 : 0u;
    }
  }
}

// Bits 8i + s of a code word as bytes i of 0 or 0xFF (-1 as s8), with `lift` = 2^(7 - s): the
// multiply moves bit 8i + s to bit 7 of byte i (a shift on the multiply-add pipe, leaving the
// integer ALU pipe, which the masks, maxima and selects need, to them), and prmt replicates
// each byte's top bit. Both in asm: the compiler would turn a multiply by 1 << n back into a
// shift.
__device__ __forceinline__ uint32_t bit_bytes(uint32_t word, uint32_t lift) {
  uint32_t moved, bytes;
  asm("mul.lo.u32 %0, %1, %2;" : "=r"(moved) : "r"(word), "r"(lift));
  asm("prmt.b32 %0, %1, 0, 0xBA98;" : "=r"(bytes) : "r"(moved));
  return bytes;
}

// A tile's two rows, max over this lane's columns 2t and 2t + 1: row g (key 2g of the tile,
// written by lane t = 0) and row g + 8 (key 2g + 1, lane t = 1). With A = -b, column c holds
// S_c + offset + 2 acc_c.
struct TileRows {
  int top, bottom;
};

__device__ __forceinline__ TileRows tile_rows(const uint4& pair, const LaneQueries& q,
                                              uint32_t lift_low, uint32_t lift_high) {
  int acc[4] = {0, 0, 0, 0};
  mma_s8(acc, bit_bytes(pair.x, lift_low), bit_bytes(pair.z, lift_low),
         bit_bytes(pair.x, lift_high), bit_bytes(pair.z, lift_high), q.b[0], q.b[1]);
  mma_s8(acc, bit_bytes(pair.y, lift_low), bit_bytes(pair.w, lift_low),
         bit_bytes(pair.y, lift_high), bit_bytes(pair.w, lift_high), q.b[2], q.b[3]);
  return {max(q.total[0] + 2 * acc[0], q.total[1] + 2 * acc[1]),
          max(q.total[0] + 2 * acc[2], q.total[1] + 2 * acc[3])};
}

// The best over the group of this lane's key: lanes t and t ^ 1 trade the row the other one
// writes; above four heads, t and t ^ 2 first fold their columns.
template <int G>
__device__ __forceinline__ int group_best(TileRows rows, int t) {
  if constexpr (G > 4) {
    rows.top = max(rows.top, __shfl_xor_sync(kFullMask, rows.top, 2));
    rows.bottom = max(rows.bottom, __shfl_xor_sync(kFullMask, rows.bottom, 2));
  }
  const bool odd = t & 1;
  const int mine = odd ? rows.bottom : rows.top, theirs = odd ? rows.top : rows.bottom;
  return max(mine, __shfl_xor_sync(kFullMask, theirs, 1));
}

// The stage's 8 tiles: tile r holds keys 16r + 2g (row g) and 16r + 2g + 1 (row g + 8), one
// 16-byte shared load per lane; each key's 16-bit value goes to staged[16r + 2g + t]. The tiles'
// products come first and the shuffles after them, so that the products of different tiles can
// overlap (a shuffle ends the compiler's scheduling block: its divergence check branches).
template <int G>
__device__ __forceinline__ void score_stage(const uint4* codes,
                                            const uint32_t (&forced)[kStageWords],
                                            const LaneQueries& q, int g, int t, uint16_t* staged) {
  const uint32_t lift_low = 1u << (7 - t), lift_high = 1u << (3 - t);
  TileRows rows[kStageTiles];
#pragma unroll
  for (int r = 0; r < kStageTiles; ++r) {
    // Read as a value: passed by reference, the uint4 left NVVM as four 4-byte shared loads.
    const uint4 pair = codes[8 * r + g];
    rows[r] = tile_rows(pair, q, lift_low, lift_high);
  }
  int best[kStageTiles];
#pragma unroll
  for (int r = 0; r < kStageTiles; ++r) best[r] = group_best<G>(rows[r], t);
  if (t >= 2) return;
  const uint32_t my_bit = 1u << (2 * g + t);  // in the word of tile r: << 16 for odd r
#pragma unroll
  for (int r = 0; r < kStageTiles; ++r)
    staged[16 * r + 2 * g + t] = forced[r / 2] & (r % 2 ? my_bit << 16 : my_bit)
                                     ? kSignCodeForced
                                     : static_cast<uint16_t>(best[r]);
}

// The stage's `count` keys from staged[shift + k] (key first + k) to the row: lane c writes the
// row's 16-byte line c, whose keys sit at staged[8c .. 8c + 7], in one store when the whole line
// belongs to the stage, key by key at the stage's two ends.
__device__ __forceinline__ void write_stage_keys(const WarpStream& s, const uint16_t* staged,
                                                 int64_t first, int lane) {
  const int count = int(min(int64_t(kStageKeys), s.length - first));
  const int begin = max(8 * lane, s.key_shift), end = min(8 * lane + 8, s.key_shift + count);
  if (begin >= end) return;
  const int64_t line = first - s.key_shift;  // staged[e] -> keys[line + e], e >= key_shift
  if (begin == 8 * lane && end == 8 * lane + 8)
    *reinterpret_cast<uint4*>(s.keys + line + begin) =
        *reinterpret_cast<const uint4*>(staged + begin);
  else
    for (int e = begin; e < end; ++e) s.keys[line + e] = staged[e];
}

// The warp's stages after the query side: wait for the oldest, refill the entry scored last time,
// score, write.
template <int G>
__device__ void stream_stages(const WarpStream& s, const WarpRing& ring, const LaneQueries& q,
                              int lane) {
  const int g = lane / 4, t = lane % 4;
  for (int stage = 0; s.first_key(stage) < s.length; ++stage) {
    cp_async_wait<kScoreStages - 2>();  // this lane's copies of `stage`
    __syncwarp();                       // every lane's, and the last stage's keys written
    request_stage(s, ring, stage + kScoreStages - 1, lane);
    uint32_t forced[kStageWords];
    stage_forced_bits(s, ring, stage, forced);
    score_stage<G>(ring.codes + (stage % kScoreStages) * (kStageKeys / 2), forced, q, g, t,
                   ring.keys + s.key_shift);
    __syncwarp();
    write_stage_keys(s, ring.keys, s.first_key(stage), lane);
  }
}

template <int D, int G>
__global__ void __launch_bounds__(kScoreThreads, 1) score_keys_kernel(BinaryScoreKeysArgs args) {
  extern __shared__ __align__(16) unsigned char score_shared[];
  auto& shared = *reinterpret_cast<ScoreShared<D, G>*>(score_shared);
  const int slot = blockIdx.y;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpStream stream = warp_stream(args, slot, warp);
  const WarpRing ring = warp_ring(shared, warp);
  // P, the codes and the EAS mask are fixed during decoding: requested before the wait.
  const ProjectionSlice<D> projection =
      load_projection<D>(args.projection + int64_t(slot) * kSignCodeBits * D);
  for (int stage = 0; stage < kScoreStages - 1; ++stage) request_stage(stream, ring, stage, lane);
  wait_for_predecessor();
  allow_successor_launch();
  const QueryChunk query =
      load_query_chunk<D, G>(args.q + b * args.q_seq_stride + int64_t(h) * G * D);
  store_projection(projection, shared);
  store_query_chunk(query, shared);
  __syncthreads();
  stage_queries(shared);
  stream_stages<G>(stream, ring, lane_queries<G>(shared.queries, lane / 4, lane % 4), lane);
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
  constexpr size_t kShared = sizeof(ScoreShared<D, G>);
  static thread_local const int resident =
      resident_blocks_per_sm(score_keys_kernel<D, G>, kScoreThreads, kShared, "score_keys_kernel") *
      device_info().sm_count;
  const int slots = args.batch * args.n_kv_heads;
  const int steps = (args.length + kBlockStageKeys - 1) / kBlockStageKeys;
  const dim3 grid(std::min(steps, std::max(1, resident / slots)), slots);
  launch_overlapped(score_keys_kernel<D, G>, grid, kScoreThreads, kShared, stream,
                    "score_keys_kernel", args);
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
  with_constant<64, 128>(args.head_dim, "binary_hash_keys: head_dim",
                         [&](auto dim) { launch_hash<decltype(dim)::value>(args, stream); });
  check(cudaGetLastError(), "hash_keys_kernel launch");
}

void binary_score_keys(const BinaryScoreKeysArgs& args, cudaStream_t stream) {
  if (args.length <= 0 || args.batch <= 0) return;
  const int group = args.n_kv_heads > 0 ? args.n_query_heads / args.n_kv_heads : 0;
  if (group < 1 || group > kMaxScoreGroup || group * args.n_kv_heads != args.n_query_heads)
    throw std::invalid_argument("binary_score_keys: needs Hq = g * Hkv with a GQA group g of 1..8");
  with_constant<64, 128>(args.head_dim, "binary_score_keys: head_dim", [&](auto dim) {
    launch_score_for_group<decltype(dim)::value>(args, group, stream);
  });
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
