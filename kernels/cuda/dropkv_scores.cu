#include <algorithm>
#include <cfloat>

#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/dropkv_scores.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"

namespace kvb::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = 64;
constexpr int kRowBlock = 16;  // the rows of one mma tile
constexpr float kLog2e = 1.4426950408889634f;

// The score of a key is summed in one fixed order, the order of the one-tile-per-block kernel this
// one replaced: row block b (rows 16b .. 16b + 15 of the group's window rows) adds into warp slot
// b % 4, the slots' row passes (b / 4) in order, and the score is ((slot 0 + slot 1) + slot 2) +
// slot 3, over the group. Within a row block: each lane's rows g then g + 8, then the butterfly
// over the 8 row groups (lanes xor 4, 8, 16).
constexpr int kSlots = 4;

// The K/V ring: stage s holds a 64-key K tile then its V tile, swizzled. 2 stages at head_dim 128
// (64 KB: 3 blocks per SM, each with one tile in flight while it computes the other), 3 at 64.
template <int D>
constexpr int kRingStages = D == 64 ? 3 : 2;
template <int D>
constexpr int kStageElements = 2 * kTileKeys* D;
template <int D>
constexpr size_t kRingBytes = size_t(kRingStages<D>) * kStageElements<D> * sizeof(bf16);

// Window row r of KV head h's group (r = (query head − h·group)·W + t) in the [W, Hq·d] layout.
template <int D>
__device__ __forceinline__ const bf16* window_row(const bf16* base, const DropKvScoreArgs& a,
                                                  int head0, int r) {
  return base + (r % a.window) * a.row_stride + (head0 + r / a.window) * D;
}

// ‖y‖² (summed in index order, as the CPU twin does) and LSE·log2 e of window rows set_row0 ..
// set_row0 + set_rows − 1, one thread per row; rows past `rows` get zeros.
template <int D>
__device__ void row_statistics(const DropKvScoreArgs& a, int head0, int rows, int set_row0,
                               int set_rows, float* y_norm, float* lse2) {
  for (int i = threadIdx.x; i < set_rows; i += blockDim.x) {
    const int r = set_row0 + i;
    float norm = 0.f, scaled_lse = 0.f;
    if (r < rows) {
      // Every load issued before the first sum: one round trip, not one per chunk.
      const int4* y = reinterpret_cast<const int4*>(window_row<D>(a.outputs, a, head0, r));
      int4 chunks[D / 8];
#pragma unroll
      for (int chunk = 0; chunk < D / 8; ++chunk) chunks[chunk] = __ldg(y + chunk);
#pragma unroll
      for (int chunk = 0; chunk < D / 8; ++chunk) {
        float v[8];
        to_float8(chunks[chunk], v);
#pragma unroll
        for (int j = 0; j < 8; ++j) norm += v[j] * v[j];
      }
      scaled_lse = a.lse[(head0 + r / a.window) * a.window + r % a.window] * kLog2e;
    }
    y_norm[i] = norm;
    lse2[i] = scaled_lse;
  }
}

// The mma A fragments of window rows r0 .. r0 + 15 over all of D, read once per block straight
// into registers: lane (g, t) holds rows r0 + g and r0 + g + 8, columns 16ks + 2t, +1 and +8, +9
// (the layout ldmatrix gives). Rows at or past `rows` are zeros.
template <int D>
__device__ __forceinline__ void load_row_fragments(uint32_t (&frag)[D / 16][4], const bf16* base,
                                                   const DropKvScoreArgs& a, int head0, int rows,
                                                   int r0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bf16* low = r0 + g < rows ? window_row<D>(base, a, head0, r0 + g) : nullptr;
  const bf16* high = r0 + g + 8 < rows ? window_row<D>(base, a, head0, r0 + g + 8) : nullptr;
  auto pair = [](const bf16* row, int column) {
    return row ? __ldg(reinterpret_cast<const unsigned*>(row + column)) : 0u;
  };
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    frag[ks][0] = pair(low, ks * 16 + 2 * t);
    frag[ks][1] = pair(high, ks * 16 + 2 * t);
    frag[ks][2] = pair(low, ks * 16 + 8 + 2 * t);
    frag[ks][3] = pair(high, ks * 16 + 8 + 2 * t);
  }
}

// sum + lo² + hi² of a register holding two bf16 (the lower column in the low half).
__device__ __forceinline__ float add_squares(float sum, uint32_t pair) {
  const float lo = __uint_as_float(pair << 16), hi = __uint_as_float(pair & 0xffff0000u);
  return fmaf(hi, hi, fmaf(lo, lo, sum));
}

// One block scores a contiguous range of `tiles_per_block` 64-key tiles of one KV head, streaming
// them through the K/V ring. Each warp keeps the A fragments (Q and Y) of its row blocks in
// registers for the whole range: kBlocksPerPass row blocks (1, 2 or 4) per 64-row pass and
// kPasses passes (1, or 2 when the group has more than 64 window rows). With fewer than 4 row
// blocks the warps split each tile's keys instead (warp w: slot w % kBlocksPerPass, keys
// (w / kBlocksPerPass)·kWarpKeys ..), so that no warp multiplies padding rows. More than
// 64·kPasses rows: the range is streamed once per set of 128 rows, each set's sums added to the
// scores the earlier sets wrote.
template <int D, int kBlocksPerPass, int kPasses>
__global__ void __launch_bounds__(kThreads, kPasses == 1 ? 3 : 2)
    dropkv_score_kernel(DropKvScoreArgs a, int tiles_per_block) {
  constexpr int kSteps = D / 16;
  constexpr int kStages = kRingStages<D>;
  constexpr int kSetRows = kRowBlock * kBlocksPerPass * kPasses;
  constexpr int kWarpKeys = kTileKeys * kBlocksPerPass / kWarps;  // 16, 32 or 64
  static_assert(kPasses == 1 || kBlocksPerPass == kSlots, "a second pass follows a full one");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ring = reinterpret_cast<bf16*>(smem_raw);
  __shared__ float s_y_norm[kSetRows], s_lse2[kSetRows];
  // Each slot's sums of a tile's keys; two buffers, so that a tile is summed after the next
  // iteration's barrier instead of behind one of its own.
  __shared__ float s_part[2][kBlocksPerPass][kTileKeys];

  const int h = blockIdx.y;
  const int tile0 = blockIdx.x * tiles_per_block;
  const int n_tiles = min(tiles_per_block, (a.length + kTileKeys - 1) / kTileKeys - tile0);
  const int group = a.n_query_heads / a.n_kv_heads;
  const int head0 = h * group;
  const int rows = group * a.window;
  // At least one set, so that a window of 0 rows still writes its zeros.
  const int n_sets = max(1, (rows + kSetRows - 1) / kSetRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int slot = warp % kBlocksPerPass;
  const int warp_key0 = warp / kBlocksPerPass * kWarpKeys;
  const bf16* keys = a.keys + h * a.head_stride;
  const bf16* values = a.values + h * a.head_stride;
  float* scores = a.scores + int64_t(h) * a.length;
  const float scale_log2 = kLog2e / sqrtf(float(D));

  auto load_stage = [&](int i) {
    bf16* stage = ring + (i % kStages) * kStageElements<D>;
    const int key0 = (tile0 + i) * kTileKeys;
    const int valid_keys = min(kTileKeys, a.length - key0);
    load_tile<D>(stage, keys + int64_t(key0) * D, D, kTileKeys, valid_keys);
    load_tile<D>(stage + kTileKeys * D, values + int64_t(key0) * D, D, kTileKeys, valid_keys);
  };
  // The slots' sums of tile i (set `set`): its scores, or the running sums of the sets so far.
  auto finish_tile = [&](int i, int set) {
    const int key = (tile0 + i) * kTileKeys + threadIdx.x;
    if (threadIdx.x >= kTileKeys || key >= a.length) return;
    const float(*part)[kTileKeys] = s_part[i & 1];
    float total = part[0][threadIdx.x];
    for (int s = 1; s < kBlocksPerPass; ++s) total += part[s][threadIdx.x];
    if (set > 0) total = scores[key] + total;
    scores[key] = set + 1 == n_sets ? total / group : total;
  };

  for (int set = 0; set < n_sets; ++set) {
    const int set_row0 = set * kSetRows;
    // The first tiles' loads go out first, under the row set-up below.
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_tiles) load_stage(s);
      cp_async_commit();
    }
    row_statistics<D>(a, head0, rows, set_row0, kSetRows, s_y_norm, s_lse2);
    uint32_t q_frag[kPasses][kSteps][4], y_frag[kPasses][kSteps][4];
    bool has_rows[kPasses];
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int r0 = set_row0 + kRowBlock * (slot + kBlocksPerPass * p);
      has_rows[p] = r0 < rows;
      load_row_fragments<D>(q_frag[p], a.queries, a, head0, rows, r0);
      load_row_fragments<D>(y_frag[p], a.outputs, a, head0, rows, r0);
    }
    __syncthreads();
    // This lane's rows g and g + 8 of each pass: ‖y‖², LSE·log2 e and the last key the row sees
    // (−1 for padding rows; keys past the length are past it too).
    float y_norm[kPasses][2], lse2[kPasses][2];
    int last_key[kPasses][2];
#pragma unroll
    for (int p = 0; p < kPasses; ++p)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int local = kRowBlock * (slot + kBlocksPerPass * p) + g + 8 * i;
        const int r = set_row0 + local;
        y_norm[p][i] = s_y_norm[local];
        lse2[p][i] = s_lse2[local];
        last_key[p][i] = r < rows ? a.length - a.window + r % a.window : -1;
      }

    for (int i = 0; i < n_tiles; ++i) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      if (i > 0) finish_tile(i - 1, set);
      if (i + kStages - 1 < n_tiles) load_stage(i + kStages - 1);
      cp_async_commit();
      const bf16* s_k = ring + (i % kStages) * kStageElements<D>;
      const bf16* s_v = s_k + kTileKeys * D;
      const int key0 = (tile0 + i) * kTileKeys;
#pragma unroll
      for (int unit = 0; unit < kWarpKeys / 16; ++unit) {
        const int unit_key0 = warp_key0 + 16 * unit;
        // This warp slot's sums over its passes for the unit's keys (two 8-key columns, this
        // lane's keys 2t and 2t + 1 of each).
        float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
        if (has_rows[0]) {
          // S = Q Kᵀ and G = Y Vᵀ for the unit's 16 keys, and this lane's share of their ‖v‖²
          // (keys g and g + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9 of every 16).
          float s[kPasses][2][4] = {}, gy[kPasses][2][4] = {};
          float v_sq[2] = {0.f, 0.f};
          const int j8 = lane / 8;
#pragma unroll
          for (int ks = 0; ks < kSteps; ++ks) {
            uint32_t kb[4], vb[4];
            const int offset =
                swizzled<D>(unit_key0 + (j8 / 2) * 8 + (lane % 8), ks * 16 + (j8 % 2) * 8);
            ldmatrix_x4(kb, s_k + offset);
            ldmatrix_x4(vb, s_v + offset);
            v_sq[0] = add_squares(add_squares(v_sq[0], vb[0]), vb[1]);
            v_sq[1] = add_squares(add_squares(v_sq[1], vb[2]), vb[3]);
#pragma unroll
            for (int p = 0; p < kPasses; ++p) {
              if (p > 0 && !has_rows[p]) continue;
              mma_bf16(s[p][0], q_frag[p][ks], kb[0], kb[1]);
              mma_bf16(s[p][1], q_frag[p][ks], kb[2], kb[3]);
              mma_bf16(gy[p][0], y_frag[p][ks], vb[0], vb[1]);
              mma_bf16(gy[p][1], y_frag[p][ks], vb[2], vb[3]);
            }
          }
          // ‖v‖² of the keys this lane's accumulators hold: column c of 8-key tile nt is key
          // nt·8 + 2t + c, whose norm the quad g = 2t + c has.
          const float v_norm_low = quad_sum(v_sq[0]), v_norm_high = quad_sum(v_sq[1]);
          float v_norm[2][2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            v_norm[0][c] = __shfl_sync(0xffffffff, v_norm_low, (2 * t + c) * 4);
            v_norm[1][c] = __shfl_sync(0xffffffff, v_norm_high, (2 * t + c) * 4);
          }
          // Per element: ω · max(0, ‖y‖² + ‖v‖² − 2⟨y,v⟩), summed over this lane's two rows, then
          // over the row block.
#pragma unroll
          for (int p = 0; p < kPasses; ++p) {
            if (p > 0 && !has_rows[p]) continue;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              float column[2] = {0.f, 0.f};
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int i_row = e >> 1;
                const int key = key0 + unit_key0 + nt * 8 + 2 * t + (e & 1);
                if (key > last_key[p][i_row]) continue;
                float prob = exp2f(s[p][nt][e] * scale_log2 - lse2[p][i_row]);
                prob = fminf(fmaxf(prob, 0.f), 1.f);
                if (a.round_p_to_bf16) prob = round_to_bf16(prob);
                const float w = prob / (1.f - prob + 1e-6f);
                const float dist =
                    fmaxf(0.f, y_norm[p][i_row] + v_norm[nt][e & 1] - 2.f * gy[p][nt][e]);
                column[e & 1] += w * w * dist;
              }
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                column[c] += __shfl_xor_sync(0xffffffff, column[c], 4);
                column[c] += __shfl_xor_sync(0xffffffff, column[c], 8);
                column[c] += __shfl_xor_sync(0xffffffff, column[c], 16);
                acc[nt][c] += column[c];
              }
            }
          }
        }
        if (g == 0)
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c)
              s_part[i & 1][slot][unit_key0 + nt * 8 + 2 * t + c] = acc[nt][c];
      }
    }
    __syncthreads();
    finish_tile(n_tiles - 1, set);
  }
}

// Pooling: one block per 2,048 positions of a head, the block's maximum of its pooled values kept
// for the protect step. A block writes the interior of its segment in place and keeps its first
// and last kernel/2 pooled values in the workspace: those positions' raw values are inputs of the
// neighbouring segments' blocks, which may not have read them yet (pooled may be raw).
constexpr int kPoolThreads = 256;
constexpr int kPoolPerThread = 8;
constexpr int kPoolSegment = kPoolThreads * kPoolPerThread;
constexpr int kFinishThreads = 128;

int pool_segments(int length) { return std::max(1, (length + kPoolSegment - 1) / kPoolSegment); }
// Workspace floats per segment for its border values.
int pool_border(int kernel) { return std::min(kPoolSegment, 2 * (kernel / 2)); }

// The border slot of offset o of a segment of `length` positions, or −1 for an interior offset.
__device__ __forceinline__ int border_slot(int o, int length, int half) {
  if (length <= 2 * half || o < half) return o;
  return o >= length - half ? o - (length - 2 * half) : -1;
}

__device__ __forceinline__ float block_max(float value, float* s_warp_max) {
  for (int off = 16; off > 0; off /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, off));
  if (threadIdx.x % 32 == 0) s_warp_max[threadIdx.x / 32] = value;
  __syncthreads();
  value = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w) value = fmaxf(value, s_warp_max[w]);
  return value;
}

__global__ void __launch_bounds__(kPoolThreads)
    pool_kernel(const float* raw, float* pooled, int length, int kernel, bool max_pool,
                float* segment_max, float* borders, int border) {
  __shared__ float s_warp_max[kPoolThreads / 32];
  const int h = blockIdx.y, segment = blockIdx.x;
  const int64_t segment_index = int64_t(h) * gridDim.x + segment;
  const int half = kernel / 2;
  const int first = segment * kPoolSegment;
  const int count = min(kPoolSegment, length - first);
  const float* in = raw + int64_t(h) * length;
  float value[kPoolPerThread];
  float best = -INFINITY;
#pragma unroll
  for (int m = 0; m < kPoolPerThread; ++m) {
    const int j = first + threadIdx.x + m * kPoolThreads;
    if (j >= first + count) continue;
    float acc = max_pool ? -INFINITY : 0.f;
    for (int o = -half; o <= half; ++o) {
      const int i = j + o;
      if (i < 0 || i >= length) continue;  // max: -inf padding; avg: zero padding
      acc = max_pool ? fmaxf(acc, in[i]) : acc + in[i];
    }
    value[m] = max_pool ? acc : acc / kernel;
    best = fmaxf(best, value[m]);
  }
  // Also orders every read of this block before its writes (pooling in place).
  best = block_max(best, s_warp_max);
  if (threadIdx.x == 0) segment_max[segment_index] = best;
  float* out = pooled + int64_t(h) * length;
#pragma unroll
  for (int m = 0; m < kPoolPerThread; ++m) {
    const int o = threadIdx.x + m * kPoolThreads;
    if (o >= count) continue;
    const int slot = border_slot(o, count, half);
    if (slot < 0)
      out[first + o] = value[m];
    else
      borders[segment_index * border + slot] = value[m];
  }
}

// The kept border values back in place, and the last `protect` positions set to the head's maximum
// (over its segments' maxima) + 1.
__global__ void __launch_bounds__(kFinishThreads)
    protect_kernel(float* pooled, int length, int kernel, int protect, const float* segment_max,
                   const float* borders, int border) {
  __shared__ float s_warp_max[kFinishThreads / 32];
  const int h = blockIdx.y, segment = blockIdx.x, segments = gridDim.x;
  const int half = kernel / 2;
  const int first = segment * kPoolSegment;
  const int count = min(kPoolSegment, length - first);
  const int tail = max(0, length - protect);
  float best = -INFINITY;
  if (first + count > tail) {  // the segment holds protected positions: they need the head max
    for (int s = threadIdx.x; s < segments; s += blockDim.x)
      best = fmaxf(best, segment_max[int64_t(h) * segments + s]);
    best = block_max(best, s_warp_max);
  }
  float* out = pooled + int64_t(h) * length;
  const float* kept = borders + (int64_t(h) * segments + segment) * border;
  for (int o = threadIdx.x; o < count; o += blockDim.x) {
    const int j = first + o;
    if (j >= tail)
      out[j] = best + 1.f;
    else if (const int slot = border_slot(o, count, half); slot >= 0)
      out[j] = kept[slot];
  }
}

// Materialising baseline: P [rows, L] then D [rows, L, d] = y - v, then the weighted norms.
__global__ void naive_probs_kernel(DropKvScoreArgs a, int h, float* probs) {
  const int group = a.n_query_heads / a.n_kv_heads;
  const int rows = group * a.window;
  const int64_t total = int64_t(rows) * a.length;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int r = int(i / a.length), j = int(i % a.length);
    const int head = h * group + r / a.window, t = r % a.window;
    float p = 0.f;
    if (j <= a.length - a.window + t) {
      float dot = 0.f;
      for (int k = 0; k < a.head_dim; ++k)
        dot += __bfloat162float(a.queries[t * a.row_stride + head * a.head_dim + k]) *
               __bfloat162float(a.keys[h * a.head_stride + int64_t(j) * a.head_dim + k]);
      p = fminf(fmaxf(expf(dot / sqrtf(float(a.head_dim)) - a.lse[head * a.window + t]), 0.f), 1.f);
      if (a.round_p_to_bf16) p = round_to_bf16(p);
    }
    probs[i] = p;
  }
}
__global__ void naive_diff_kernel(DropKvScoreArgs a, int h, float* diff) {
  const int group = a.n_query_heads / a.n_kv_heads;
  const int rows = group * a.window;
  const int64_t total = int64_t(rows) * a.length * a.head_dim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int k = int(i % a.head_dim);
    const int64_t rj = i / a.head_dim;
    const int r = int(rj / a.length), j = int(rj % a.length);
    const int head = h * group + r / a.window, t = r % a.window;
    diff[i] = __bfloat162float(a.outputs[t * a.row_stride + head * a.head_dim + k]) -
              __bfloat162float(a.values[h * a.head_stride + int64_t(j) * a.head_dim + k]);
  }
}
__global__ void naive_reduce_kernel(DropKvScoreArgs a, int h, const float* probs,
                                    const float* diff) {
  const int group = a.n_query_heads / a.n_kv_heads;
  const int rows = group * a.window;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < a.length; j += gridDim.x * blockDim.x) {
    float total = 0.f;
    for (int r = 0; r < rows; ++r) {
      const float p = probs[int64_t(r) * a.length + j];
      const float w = p / (1.f - p + 1e-6f);
      float norm = 0.f;
      const float* dd = diff + (int64_t(r) * a.length + j) * a.head_dim;
      for (int k = 0; k < a.head_dim; ++k) norm += dd[k] * dd[k];
      total += w * w * norm;
    }
    a.scores[int64_t(h) * a.length + j] = total / group;
  }
}

template <int D, int kBlocksPerPass, int kPasses>
void launch_scores(const DropKvScoreArgs& args, cudaStream_t stream) {
  auto* kernel = dropkv_score_kernel<D, kBlocksPerPass, kPasses>;
  static const int resident =
      resident_blocks_per_sm(kernel, kThreads, kRingBytes<D>, "dropkv_score_kernel");
  static const int sm_count = device_info().sm_count;
  const int tiles = (args.length + kTileKeys - 1) / kTileKeys;
  // One wave: the resident blocks split among the KV heads, each head's tiles among its blocks.
  int tiles_per_block = args.tiles_per_block;
  if (tiles_per_block <= 0) {
    const int blocks_per_head = std::max(1, resident * sm_count / args.n_kv_heads);
    tiles_per_block = (tiles + blocks_per_head - 1) / blocks_per_head;
  }
  tiles_per_block = std::min(tiles_per_block, tiles);
  const dim3 grid((tiles + tiles_per_block - 1) / tiles_per_block, args.n_kv_heads);
  kernel<<<grid, kThreads, kRingBytes<D>, stream>>>(args, tiles_per_block);
  check(cudaGetLastError(), "dropkv_score_kernel");
}

// The instance for the group's window rows: 1, 2 or 4 row blocks in one pass, or two passes.
template <int D>
void launch_for_rows(const DropKvScoreArgs& args, cudaStream_t stream) {
  const int row_blocks =
      (args.n_query_heads / args.n_kv_heads * args.window + kRowBlock - 1) / kRowBlock;
  if (row_blocks <= 1)
    launch_scores<D, 1, 1>(args, stream);
  else if (row_blocks <= 2)
    launch_scores<D, 2, 1>(args, stream);
  else if (row_blocks <= kSlots)
    launch_scores<D, kSlots, 1>(args, stream);
  else
    launch_scores<D, kSlots, 2>(args, stream);
}

}  // namespace

void dropkv_scores(const DropKvScoreArgs& args, cudaStream_t stream) {
  if (args.length <= 0) return;
  with_constant<64, 128>(args.head_dim, "dropkv_scores: head_dim",
                         [&](auto dim) { launch_for_rows<decltype(dim)::value>(args, stream); });
}

size_t pool_and_protect_workspace_bytes(int n_heads, int length, int kernel) {
  return size_t(n_heads) * pool_segments(length) * (1 + pool_border(kernel)) * sizeof(float);
}

void pool_and_protect(const float* raw, float* pooled, int n_heads, int length, int kernel,
                      bool max_pool, int protect, void* workspace, cudaStream_t stream) {
  if (length <= 0 || n_heads <= 0) return;
  if (workspace == nullptr)
    throw std::invalid_argument(
        "pool_and_protect: give a workspace of pool_and_protect_workspace_bytes bytes");
  const dim3 grid(pool_segments(length), n_heads);
  float* segment_max = static_cast<float*>(workspace);
  float* borders = segment_max + size_t(n_heads) * grid.x;
  const int border = pool_border(kernel);
  pool_kernel<<<grid, kPoolThreads, 0, stream>>>(raw, pooled, length, kernel, max_pool, segment_max,
                                                 borders, border);
  check(cudaGetLastError(), "pool_kernel");
  protect_kernel<<<grid, kFinishThreads, 0, stream>>>(pooled, length, kernel, protect, segment_max,
                                                      borders, border);
  check(cudaGetLastError(), "protect_kernel");
}

size_t dropkv_scores_materialised(const DropKvScoreArgs& args, cudaStream_t stream) {
  const int rows = args.n_query_heads / args.n_kv_heads * args.window;
  DeviceBuffer probs(size_t(rows) * args.length * 4, "naive probs");
  DeviceBuffer diff(size_t(rows) * args.length * args.head_dim * 4, "naive differences");
  for (int h = 0; h < args.n_kv_heads; ++h) {
    naive_probs_kernel<<<2048, 256, 0, stream>>>(args, h, probs.as<float>());
    naive_diff_kernel<<<4096, 256, 0, stream>>>(args, h, diff.as<float>());
    naive_reduce_kernel<<<(args.length + 255) / 256, 256, 0, stream>>>(args, h, probs.as<float>(),
                                                                       diff.as<float>());
  }
  check(cudaGetLastError(), "dropkv_scores_materialised");
  check(cudaStreamSynchronize(stream), "dropkv_scores_materialised");
  return probs.bytes() + diff.bytes();
}

}  // namespace kvb::cuda
