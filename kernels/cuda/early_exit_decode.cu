// ART decode attention: the recent-first early-exit walk in split-KV form. Semantics, layout and
// limits: kernels/cuda/early_exit_decode.h. CPU twin: kernels/cpu/early_exit_attention.cc.
//
// Per tile (64 entries of one walk block): cp.async double buffering and the mma layout of
// decode_mma_kernel (each warp 16 keys, rows = the walker's query heads). The decider (split 0)
// then merges the warps' states through shared memory, reduces ||o_b||^2, ||o_{b-1}||^2 and
// ||o_b - o_{b-1}||^2 per head, and lanes 0 run the counters; the other splits poll the walker's
// stop word once per tile and leave at a tile boundary once it is set.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/decode_append.cuh"
#include "kernels/cuda/early_exit_decode.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"
#include "kernels/cuda/split_merge.cuh"

namespace kvb::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;
constexpr int kWarps = 4;
constexpr int kTile = kEarlyExitBlock;
constexpr int kMaxRows = 8;  // query heads per walker (rows g < 8 of the mma tile; g + 8 stay zero)
// The K/V ring: 3 tiles in flight per split, as decode_attention.cu's one-wave dense kernel.
constexpr int kStages = 3;
constexpr float kLog2e = 1.4426950408889634f;
// Automatic layout: the decider's blocks as a share of the other splits' chunk (walk_layout). 25%
// costs less than 50% with termination off (results/gpu-kernel-tuning.md §7.1). The window bounds
// where the walk can stop (the synthetic profile stops after 4 blocks at both lengths).
constexpr int kDeciderSharePercent = 25;

__host__ __device__ inline int clamp_int(int x, int low, int high) {
  return x < low ? low : (x > high ? high : x);
}

__host__ __device__ inline int walk_blocks(int n, int sink_tokens) {
  if (n <= 0) return 0;
  const int sinks = clamp_int(sink_tokens, 0, n);
  return (sinks > 0 ? 1 : 0) + (n - sinks + kTile - 1) / kTile;
}

// Entries [begin, end) of walk block w (0 = sink block when there are sinks, then recent-first).
__device__ inline void block_rows(int w, int n, int sinks, int& begin, int& end) {
  if (sinks > 0 && w == 0) {
    begin = 0;
    end = sinks;
    return;
  }
  const int recent = w - (sinks > 0 ? 1 : 0);
  end = n - recent * kTile;
  begin = max(sinks, end - kTile);
}

struct Walker {
  int index = 0;    // into walker_state
  int head0 = 0;    // first query head
  int rows = 0;     // query heads walking together
  int n = 0;        // entries walked
  int64_t kv_row0 = 0;
  const int32_t* list = nullptr;  // index mode
  const float* bias = nullptr;
};

// axis: the KV head (dense) or the query head (index lists). The walker's index (into
// walker_state) needs no load.
template <bool kIndexed>
__device__ inline int walker_index(const DecodeAttentionArgs& a, int axis, int b) {
  return kIndexed ? b * a.n_query_heads + axis : b * a.n_kv_heads + axis;
}

template <bool kIndexed>
__device__ inline Walker walker_of(const DecodeAttentionArgs& a, int axis, int b) {
  Walker w;
  const int group = a.n_query_heads / a.n_kv_heads;
  const int kv_head = kIndexed ? axis / group : axis;
  w.kv_row0 = a.kv_offset[b * a.n_kv_heads + kv_head];
  if constexpr (kIndexed) {
    w.index = walker_index<true>(a, axis, b);
    w.head0 = axis;
    w.rows = 1;
    const int64_t offset = a.index_offset[w.index];
    w.n = a.index_count[w.index];
    w.list = a.indices + offset;
    if (a.logit_bias) w.bias = a.logit_bias + offset;
  } else {
    w.index = walker_index<false>(a, axis, b);
    w.head0 = kv_head * group;
    w.rows = group;
    // From L2 (the walk reads it before and after the wait; see early_tile in walk_split), with
    // the step's entry.
    w.n = __ldcg(a.kv_length + w.index) + (a.append.positions != nullptr ? 1 : 0);
  }
  return w;
}

__device__ __forceinline__ uint32_t load_pair(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The decider's test after a block: the warps' states (each over its 16 keys of every tile) are
// merged through shared memory (the current tile's K and V buffers, free once every warp is done
// with them), o_b = sum_w 2^(m_w - M) acc_w / sum_w 2^(m_w - M) l_w; warp w takes heads w and
// w + 4, reduces the three sums over the head dimension (‖o_b‖², ‖o_{b-1}‖², ‖o_b - o_{b-1}‖²)
// and runs that head's counter; then every
// thread reads the heads' verdicts.
template <int D>
struct DeciderScratch {
  float stats[kWarps][kMaxRows][3];  // per warp and head: max (log2), sum, this tile's sum
  float previous[kMaxRows * D];      // merged o_{b-1} (shared memory: registers are all taken)
  int counter[kMaxRows];
  int stable[kMaxRows];
  bf16 query[kMaxRows * D];  // with the step's append: the rotated queries (every split)
};
// Dynamic shared memory: K and V tiles [kStages][64][D] each, the bias [kStages][64] (index mode),
// the stop-word copies [kStages][4] (int), then the
// decider's scratch and the stop flag.
template <int D>
constexpr size_t kTileBytes = kStages*(2 * kTile * D * sizeof(bf16) + kTile * sizeof(float) + 16);
template <int D>
constexpr size_t kSharedBytes = kTileBytes<D> + sizeof(DeciderScratch<D>);

// Which walk blocks each split folds: the decider (chunk 0) blocks [0, decider_blocks), chunk
// c >= 1 blocks [decider_blocks + (c-1) chunk_blocks, decider_blocks + c chunk_blocks).
struct WalkLayout {
  int decider_blocks = 1;
  int chunk_blocks = 1;
  int n_chunks = 1;
};

__host__ __device__ inline int chunks_used(const WalkLayout& layout, int blocks) {
  if (blocks <= layout.decider_blocks) return 1;
  return 1 + (blocks - layout.decider_blocks + layout.chunk_blocks - 1) / layout.chunk_blocks;
}

// One split's walk. The decider and the other splits are separate instantiations, so that the
// others' loop carries none of the decider's register pressure (their query fragments stay in
// registers, as in the plain kernel; the decider re-reads them per tile).
template <int D, bool kIndexed, bool kDecider>
__device__ __forceinline__ void walk_split(const EarlyExitDecodeArgs& ea, const WalkLayout& layout,
                                           unsigned char* smem_raw, DeciderScratch<D>& scratch,
                                           bool early_tile) {
  const DecodeAttentionArgs& args = ea.attention;
  const EarlyExitDecodeOptions& opt = ea.options;
  bf16* s_k = reinterpret_cast<bf16*>(smem_raw);                  // [2][64][D]
  bf16* s_v = s_k + kStages * kTile * D;                          // [kStages][64][D]
  float* s_bias =
      reinterpret_cast<float*>(s_v + kStages * kTile * D);         // [kStages][64] (index mode)
  int* s_poll = reinterpret_cast<int*>(s_bias + kStages * kTile);  // [kStages][4]

  const int chunk = blockIdx.x;
  const int n_chunks = layout.n_chunks;
  const int b = blockIdx.z;
  constexpr bool decider = kDecider;
  const int first = decider ? 0 : layout.decider_blocks + (chunk - 1) * layout.chunk_blocks;
  // The walk's extent follows the walker's length: the recent-first blocks are cut from its end.
  Walker wk;
  int sinks = 0, n_tiles = 0;
  auto follow_walker = [&] {
    wk = walker_of<kIndexed>(args, blockIdx.y, b);
    sinks = clamp_int(opt.sink_tokens, 0, wk.n);
    const int blocks = walk_blocks(wk.n, opt.sink_tokens);
    n_tiles = min(blocks, first + (decider ? layout.decider_blocks : layout.chunk_blocks)) - first;
  };
  const int tid = threadIdx.x;
  int tiles_loaded = 0;
  // Before the wait (launch.cuh) only settled rows are read; the stop word's copy may be stale
  // there, which reads as "not stopped" (every older mark is below this call's).
  auto issue = [&](int w, int buf) {
    int begin, end;
    block_rows(w, wk.n, sinks, begin, end);
    const int count = end - begin;
    bf16* k_dst = s_k + buf * kTile * D;
    bf16* v_dst = s_v + buf * kTile * D;
    if constexpr (kIndexed) {
      load_gather_tile<D>(k_dst, args.k + wk.kv_row0 * D, wk.list + begin, kTile, count);
      load_gather_tile<D>(v_dst, args.v + wk.kv_row0 * D, wk.list + begin, kTile, count);
      if (wk.bias != nullptr && tid < kTile)
        cp_async_small<4>(s_bias + buf * kTile + tid, wk.bias + begin + (tid < count ? tid : 0),
                          tid < count);
    } else {
      load_tile<D>(k_dst, args.k + (wk.kv_row0 + begin) * D, D, kTile, count);
      load_tile<D>(v_dst, args.v + (wk.kv_row0 + begin) * D, D, kTile, count);
    }
    if (!kDecider && tid == 0) {  // the stop word's 16-byte line, landing with this tile
      const uintptr_t line = reinterpret_cast<uintptr_t>(
                                 ea.walker_state + int64_t(wk.index) * kStateWords + kStopWord) &
                             ~uintptr_t(15);
      cp_async_16(s_poll + buf * 4, reinterpret_cast<const void*>(line), true);
    }
    cp_async_commit();
    ++tiles_loaded;
  };
  // Dense walks: the first tile's copy leaves before the wait when its rows are settled, as in
  // decode_mma_kernel (offsets change only when the cache is allocated; within a decode step
  // kernels only append, so the length read here is the step's old one or one more, and rows below
  // it minus one are final). The tile's rows are cut from the walker's end, so if the length read
  // after the wait differs, the copy is dropped and the tile is fetched again.
  bool tile0_early = false;
  if constexpr (!kIndexed) {
    if (early_tile) {
      follow_walker();
      const int stored = wk.n - (args.append.positions != nullptr ? 1 : 0);
      int begin = 0, end = 0;
      if (n_tiles > 0) block_rows(first, wk.n, sinks, begin, end);
      tile0_early = n_tiles > 0 && end <= stored - 1;
      if (tile0_early) issue(first, 0);
    }
  }
  wait_for_predecessor();
  allow_successor_launch();
  // This call's stop mark (the merge of the previous call advanced the epoch): issued first, so its
  // round trip overlaps the length's instead of following it (the first poll compares with it).
  int* state = ea.walker_state + int64_t(walker_index<kIndexed>(args, blockIdx.y, b)) * kStateWords;
  const int stop_mark = load_now(state + kEpoch) + 1;
  const int n_before_wait = wk.n;
  follow_walker();
  // The queries' loads leave before anything waits on the walker's length (one round trip after
  // the wait, not two). With the step's append (dense walks) every split rotates the group's
  // queries into shared memory; without, the other splits load their fragments from the input.
  const DecodeAppend& append = args.append;
  const bool appends = !kIndexed && append.positions != nullptr;
  const bf16* qkv_row = args.q + b * args.q_seq_stride;
  StepRope<D> rope;
  if (appends) {
    rope.set_up(append);
    rope.at_position(append.positions[b]);
    rotate_queries<D, kThreads>(
        append, rope, qkv_row, wk.head0, wk.rows, kMaxRows,
        [&](int r, int col, bf16 value) { scratch.query[r * D + col] = value; });
  }
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4, j = lane / 8;
  constexpr int kSteps = D / 16, kDimTiles = D / 8;
  // Query fragments, held in registers for the whole walk (as the plain kernel): row g holds
  // columns 2t, 2t+1 and 2t+8, 2t+9; rows 8..15 of the mma tile stay zero (at most 8 heads).
  const bf16* q_row = appends ? scratch.query + g * D + 2 * t
                              : args.q + b * args.q_seq_stride + int64_t(wk.head0 + g) * D + 2 * t;
  const bool q_live = g < wk.rows;
  uint32_t q_frag[kSteps][2];
  auto load_query = [&] {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      q_frag[ks][0] = q_live ? load_pair(q_row + ks * 16) : 0u;
      q_frag[ks][1] = q_live ? load_pair(q_row + ks * 16 + 8) : 0u;
    }
  };
  if constexpr (!kDecider)
    if (!appends) load_query();

  if (tile0_early && wk.n != n_before_wait) {
    cp_async_wait<0>();  // this thread's copies land before it refills the same slot
    tile0_early = false;
    tiles_loaded = 0;
  }
  auto partial_of = [&](int row) {
    return args.workspace +
           ((int64_t(b) * args.n_query_heads + wk.head0 + row) * n_chunks + chunk) * (D + 2);
  };
  if (n_tiles <= 0) {  // an empty partial (max -inf), so the merge needs no length
    if (decider && threadIdx.x == 0)
      ea.walker_state[int64_t(wk.index) * kStateWords + kStopResult] = 0;
    for (int idx = threadIdx.x; idx < wk.rows * (D + 2); idx += kThreads)
      partial_of(idx / (D + 2))[idx % (D + 2)] = idx % (D + 2) == 0 ? -INFINITY : 0.f;
    return;
  }
  // The stop word holds epoch + 1 once this call's decider stopped (older values are stale), so it
  // never needs a reset; the merge kernel advances the epoch after the walk.
  volatile int* stop_word = state + kStopWord;
  if (appends) {
    // The split whose walk block holds the new entry (the sink block while the cache is within the
    // sinks, else the most recent block) writes it before its first tile copy.
    const int stored = wk.n - 1;
    const int newest = stored < sinks ? 0 : (sinks > 0 ? 1 : 0);
    if (first <= newest && newest < first + n_tiles)
      write_new_entry<D, kThreads>(append, rope, qkv_row, args.n_query_heads, args.n_kv_heads,
                                   blockIdx.y, wk.kv_row0 + stored);
    __syncthreads();  // the tile copies read the new row; the rotated queries are in place
  }
  if (!tile0_early) issue(first, 0);
#pragma unroll
  for (int ahead = 1; ahead + 1 < kStages; ++ahead) {  // one commit group per ring slot, even empty
    if (ahead < n_tiles)
      issue(first + ahead, ahead);
    else
      cp_async_commit();
  }
  if (tid < kMaxRows) scratch.counter[tid] = 0;
  if constexpr (!kDecider)
    if (appends) load_query();

  // Per warp (its 16 keys of every tile) online softmax; row_sum is this thread's share.
  float o[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const float scale_log2 = args.scale * kLog2e;
  bool stop = false;
  int stopped_at = -1;  // decider: the walk block it stopped after
  // Non-deciders poll the stop word with each tile's copy: an L2 copy (cp.async.cg, so no stale L1
  // line) of its 16-byte line into the tile's ring slot, read after the tile's barrier. A stop is
  // seen kStages - 1 tiles late, and the poll never waits on its own round trip (as a load by one
  // thread it did once the tiles ran ahead of it, and so did one issued after the barrier; both
  // measured far slower, results/gpu-kernel-tuning.md §7.2).
  const int poll_word = static_cast<int>((reinterpret_cast<uintptr_t>(stop_word) & 15) / 4);

  for (int i = 0;; ++i) {
    const int buf = i % kStages;
    const int w = first + i;
    // Into the slot the previous tile used (every warp left it at that tile's last barrier).
    if (i + kStages - 1 < n_tiles)
      issue(w + kStages - 1, (i + kStages - 1) % kStages);
    else
      cp_async_commit();
    if constexpr (kDecider) load_query();  // L1 hits, while the tile lands
    cp_async_wait<kStages - 1>();          // this tile's group (and its poll) has landed
    __syncthreads();
    if (!decider &&
        s_poll[buf * 4 + poll_word] == stop_mark) {  // block-uniform: the decider stopped
      stop = true;
      break;
    }
    int begin, end;
    block_rows(w, wk.n, sinks, begin, end);
    const int count = end - begin;
    bf16* k_tile = s_k + buf * kTile * D;
    bf16* v_tile = s_v + buf * kTile * D;

    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint32_t a[4] = {q_frag[ks][0], 0u, q_frag[ks][1], 0u};
      uint32_t kb[4];
      ldmatrix_x4(kb, k_tile + swizzled<D>(warp * 16 + (j / 2) * 8 + (lane % 8), ks * 16 + (j % 2) * 8));
      mma_bf16(s[0], a, kb[0], kb[1]);
      mma_bf16(s[1], a, kb[2], kb[3]);
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp * 16 + nt * 8 + 2 * t + (e & 1);
        float value = -INFINITY;
        if (key < count) {
          value = s[nt][e] * scale_log2;
          if (kIndexed && wk.bias != nullptr) value += s_bias[buf * kTile + key] * kLog2e;
        }
        s[nt][e] = value;
        tile_max[e >> 1] = fmaxf(tile_max[e >> 1], value);
      }
    float correction[2], tile_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = quad_max(tile_max[r]);
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      correction[r] = new_max == -INFINITY ? 1.f : exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const float p = row_max[r] == -INFINITY ? 0.f : exp2f(s[nt][e] - row_max[r]);
        s[nt][e] = p;
        tile_sum[r] += p;
      }
    row_sum[0] += tile_sum[0];
    row_sum[1] += tile_sum[1];
    const uint32_t p_frag[4] = {pack_bf16(s[0][0], s[0][1]), pack_bf16(s[0][2], s[0][3]),
                                pack_bf16(s[1][0], s[1][1]), pack_bf16(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < kDimTiles / 2; ++dp) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        o[2 * dp][e] *= correction[e >> 1];
        o[2 * dp + 1][e] *= correction[e >> 1];
      }
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, v_tile + swizzled<D>(warp * 16 + (j % 2) * 8 + (lane % 8), dp * 16 + (j / 2) * 8));
      mma_bf16(o[2 * dp], p_frag, vb[0], vb[1]);
      mma_bf16(o[2 * dp + 1], p_frag, vb[2], vb[3]);
    }
    __syncthreads();  // every warp is done with this tile's K and V

    if (decider) {
      // (1) Each warp's state of the group's heads into shared memory: per-warp accumulators in
      // the tile's K (warps 0, 1) and V (warps 2, 3) buffers, max and sums in scratch.stats.
      float* s_acc = reinterpret_cast<float*>(warp < 2 ? k_tile : v_tile) + (warp % 2) * kMaxRows * D;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float warp_sum = row_sum[r], warp_tile = tile_sum[r];
        warp_sum = quad_sum(warp_sum);
        warp_tile = quad_sum(warp_tile);
        const int row = g + 8 * r;
        if (row >= wk.rows) continue;
        if (t == 0) {
          scratch.stats[warp][row][0] = row_max[r];
          scratch.stats[warp][row][1] = warp_sum;
          scratch.stats[warp][row][2] = warp_tile;
        }
#pragma unroll
        for (int dt = 0; dt < kDimTiles; ++dt) {
          s_acc[row * D + dt * 8 + 2 * t] = o[dt][2 * r];
          s_acc[row * D + dt * 8 + 2 * t + 1] = o[dt][2 * r + 1];
        }
      }
      __syncthreads();
      // (2) Warp w merges heads w and w + 4: o_b, the three sums over the head dimension, and
      // that head's counter (lane 0).
      for (int row = warp; row < wk.rows; row += kWarps) {  // warp-uniform
        float weight[kWarps], best = -INFINITY, mass = 0.f, added = 0.f;
#pragma unroll
        for (int q = 0; q < kWarps; ++q) best = fmaxf(best, scratch.stats[q][row][0]);
#pragma unroll
        for (int q = 0; q < kWarps; ++q) {
          weight[q] = exp2f(scratch.stats[q][row][0] - best);
          mass += scratch.stats[q][row][1] * weight[q];
          added += scratch.stats[q][row][2] * weight[q];
        }
        float cc = 0.f, pp = 0.f, dd = 0.f;
#pragma unroll
        for (int dim = lane; dim < D; dim += 32) {
          float value = 0.f;
#pragma unroll
          for (int q = 0; q < kWarps; ++q) {
            const float* acc = reinterpret_cast<const float*>(q < 2 ? k_tile : v_tile) + (q % 2) * kMaxRows * D;
            value += acc[row * D + dim] * weight[q];
          }
          const float current = mass > 0.f ? value / mass : 0.f;
          const float before = w > 0 ? scratch.previous[row * D + dim] : 0.f;
          cc += current * current;
          pp += before * before;
          dd += (current - before) * (current - before);
          scratch.previous[row * D + dim] = current;
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) {
          cc += __shfl_xor_sync(0xffffffff, cc, off);
          pp += __shfl_xor_sync(0xffffffff, pp, off);
          dd += __shfl_xor_sync(0xffffffff, dd, off);
        }
        if (lane == 0) {
          bool stable = false;
          if (w > 0) {  // no previous output to compare with after the first block
            // The CPU walk's readings from the same three sums (early_exit_attention.cc).
            const float current_norm = sqrtf(cc), previous_norm = sqrtf(pp);
            const float norm_step = current_norm - previous_norm;
            const float d_scale = opt.scale_criterion == EarlyExitScale::kNorm
                                      ? fabsf(norm_step) / fmaxf(previous_norm, FLT_MIN)
                                      : (opt.scale_criterion == EarlyExitScale::kChange
                                             ? sqrtf(dd) / fmaxf(current_norm, FLT_MIN)
                                             : added / mass);
            const float denominator = 2.f * previous_norm * current_norm;
            const float d_direction =
                denominator > 0.f ? fmaxf(0.f, (dd - norm_step * norm_step) / denominator) : 1.f;
            const bool scale_ok = !opt.use_scale || d_scale < opt.tau;
            const bool direction_ok = !opt.use_direction || d_direction < opt.phi;
            if (scale_ok && direction_ok) {
              ++scratch.counter[row];
            } else {
              scratch.counter[row] = 0;
            }
            stable = scratch.counter[row] >= opt.patience;
          }
          scratch.stable[row] = stable ? 1 : 0;
        }
      }
      __syncthreads();
      // (3) The group stops when every head is stable (every thread reads the same verdicts).
      bool all_stable = true;
      for (int row = 0; row < wk.rows; ++row) all_stable &= scratch.stable[row] != 0;
      const bool stop_here = all_stable && opt.enabled;
      if (stop_here && tid == 0) atomicExch(state + kStopWord, stop_mark);
      stopped_at = stop_here ? w : -1;
    }
    stop = decider && stopped_at >= 0;
    if (stop || i + 1 >= n_tiles) break;
  }
  if (decider && tid == 0) state[kStopResult] = stopped_at + 1;  // every call writes it
  cp_async_wait<0>();  // a tile prefetched past the stop is never used, but must land first
  if (tid == 0) atomicAdd(state + kLoadedScratch, tiles_loaded);
  if (!decider && stop) return;  // the merge uses the decider alone

  // The warps' states into the partial, through the K tiles' shared memory (free once every warp
  // is done with them).
  __syncthreads();
  store_split_partials<D, kThreads>(o, row_max, row_sum, reinterpret_cast<float*>(s_k), wk.rows,
                                    partial_of);
}

template <int D, bool kIndexed>
__global__ void __launch_bounds__(kThreads, 2)
    early_exit_walk_kernel(EarlyExitDecodeArgs ea, WalkLayout layout, bool early_tile) {
  // Launched overlapped (launch.cuh): walk_split waits for the predecessor after the first tile's
  // copy.
  // All shared memory is dynamic, tiles first: static shared memory would come first and leave
  // the tiles 80 bytes off a 128-byte boundary, which split every tile copy's L2 requests (seen
  // with ncu; results/gpu-kernel-tuning.md §7.3) and the swizzle.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& scratch = *reinterpret_cast<DeciderScratch<D>*>(smem_raw + kTileBytes<D>);
  if (blockIdx.x == 0) {
    walk_split<D, kIndexed, true>(ea, layout, smem_raw, scratch, early_tile);
  } else {
    walk_split<D, kIndexed, false>(ea, layout, smem_raw, scratch, early_tile);
  }
}

// One thread block per (query head, sequence), as decode_merge_kernel: merges the chunks the walk
// used (the decider alone when it stopped); the walker's first head also writes the visited /
// total / loaded words and the totals, clears the loaded counter, advances the epoch and, with the
// step's append, the length. Nothing else reads those words during the merge, so no block waits
// on another.
template <int D, bool kIndexed>
__global__ void early_exit_merge_kernel(EarlyExitDecodeArgs ea, WalkLayout layout) {
  wait_for_predecessor();
  allow_successor_launch();
  const int n_chunks = layout.n_chunks;
  const DecodeAttentionArgs& args = ea.attention;
  const int head = blockIdx.x;
  const int b = blockIdx.y;
  const int group = args.n_query_heads / args.n_kv_heads;
  const Walker wk = walker_of<kIndexed>(args, kIndexed ? head : head / group, b);
  const int blocks = walk_blocks(wk.n, ea.options.sink_tokens);
  int* state = ea.walker_state + int64_t(wk.index) * kStateWords;
  // The walker's first head keeps the books; its reads are issued with the stop word's, not after
  // the output (a dependent round trip at the end of the call).
  const bool bookkeeper = threadIdx.x == 0 && head == wk.head0;
  const int stop = state[kStopResult];
  const int loaded = bookkeeper ? state[kLoadedScratch] : 0;
  const int epoch = bookkeeper ? state[kEpoch] : 0;
  // Every split wrote a partial (empty: max -inf); after a stop only the decider's is this call's.
  const int used = stop != 0 ? 1 : n_chunks;
  merge_split_partials<D>(
      args.workspace + (int64_t(b) * args.n_query_heads + head) * n_chunks * (D + 2), n_chunks,
      used, args.out + b * args.out_seq_stride + head * D);
  if (bookkeeper) {
    const int visited = stop != 0 ? stop : blocks;
    state[kBlocksVisited] = visited;
    state[kBlocksTotal] = blocks;
    state[kBlocksLoaded] = loaded;
    state[kLoadedScratch] = 0;
    state[kEpoch] = epoch + 1;
    // The step's entry (walker_of counted it): the other blocks of this merge need no length.
    if (!kIndexed && args.append.positions != nullptr) args.append.kv_length[wk.index] = wk.n;
    if (ea.totals != nullptr) {
      atomicAdd(ea.totals + 0, static_cast<unsigned long long>(visited));
      atomicAdd(ea.totals + 1, static_cast<unsigned long long>(blocks));
      atomicAdd(ea.totals + 2, static_cast<unsigned long long>(loaded));
    }
  }
}

int sm_count() {
  static thread_local int count = device_info().sm_count;
  return count;
}

// Walk thread blocks resident per SM, from the occupancy calculator; also opts the kernel into its
// dynamic shared memory, once.
template <int D, bool kIndexed>
int walk_blocks_per_sm() {
  static const int blocks = resident_blocks_per_sm(early_exit_walk_kernel<D, kIndexed>, kThreads,
                                                   kSharedBytes<D>, "early_exit_walk_kernel");
  return blocks;
}

int walk_resident_per_sm(const DecodeAttentionArgs& a) {
  const bool indexed = a.indices != nullptr;
  if (a.head_dim == 64)
    return indexed ? walk_blocks_per_sm<64, true>() : walk_blocks_per_sm<64, false>();
  return indexed ? walk_blocks_per_sm<128, true>() : walk_blocks_per_sm<128, false>();
}

template <int D, bool kIndexed>
void launch(const EarlyExitDecodeArgs& ea, const WalkLayout& layout, cudaStream_t stream) {
  const DecodeAttentionArgs& a = ea.attention;
  constexpr size_t smem = kSharedBytes<D>;
  walk_blocks_per_sm<D, kIndexed>();  // opts the kernel into its shared memory
  const int axis = kIndexed ? a.n_query_heads : a.n_kv_heads;
  launch_overlapped(early_exit_walk_kernel<D, kIndexed>, dim3(layout.n_chunks, axis, a.batch),
                    kThreads, smem, stream, "early_exit_walk_kernel", ea, layout,
                    early_tile_enabled());
  launch_overlapped(early_exit_merge_kernel<D, kIndexed>, dim3(a.n_query_heads, a.batch), D, 0, stream,
                    "early_exit_merge_kernel", ea, layout);
}

template <int D>
void launch_for_dim(const EarlyExitDecodeArgs& ea, const WalkLayout& layout, cudaStream_t stream) {
  if (ea.attention.indices != nullptr) {
    launch<D, true>(ea, layout, stream);
  } else {
    launch<D, false>(ea, layout, stream);
  }
}

// The automatic layout starts from the plain kernel's split count S and chunk C
// (decode_attention.cu, choose_chunk: as many thread blocks per SM as fit at once over all walkers,
// in dense mode no more), in walk blocks. The decider takes kDeciderSharePercent of C: its
// per-block merge and test make each of its blocks slower, and the slowest split is the kernel's
// time. The other splits keep C, which may need one split more than the plain kernel; when that
// extra thread block per walker would not fit the resident slots, the other splits stretch over S -
// 1 splits instead (a second wave of a few blocks costs far more than a block per split).
WalkLayout walk_layout(const EarlyExitDecodeArgs& args) {
  const int max_blocks = std::max(1, walk_blocks(args.attention.max_kv_length, args.options.sink_tokens));
  const int walkers = std::max(1, early_exit_walkers(args.attention));
  const int slots = walk_resident_per_sm(args.attention) * sm_count();
  const bool dense = args.attention.indices == nullptr;
  const int splits = std::max(1, dense ? slots / walkers : (slots + walkers - 1) / walkers);
  WalkLayout layout;
  layout.chunk_blocks = args.chunk_blocks > 0 ? args.chunk_blocks : std::max(1, (max_blocks + splits - 1) / splits);
  if (args.decider_blocks > 0) {
    layout.decider_blocks = args.decider_blocks;
  } else if (args.chunk_blocks > 0) {
    layout.decider_blocks = args.chunk_blocks;
  } else {
    layout.decider_blocks = std::max(1, (layout.chunk_blocks * kDeciderSharePercent + 99) / 100);
  }
  layout.n_chunks = chunks_used(layout, max_blocks);
  if (args.chunk_blocks <= 0 && layout.n_chunks > splits && int64_t(layout.n_chunks) * walkers > slots &&
      splits > 1) {
    const int rest = max_blocks - layout.decider_blocks;
    layout.chunk_blocks = (rest + splits - 2) / (splits - 1);
    layout.n_chunks = chunks_used(layout, max_blocks);
  }
  return layout;
}

}  // namespace

int early_exit_walkers(const DecodeAttentionArgs& args) {
  return args.batch * (args.indices != nullptr ? args.n_query_heads : args.n_kv_heads);
}

int early_exit_walk_blocks(int n, int sink_tokens) { return walk_blocks(n, sink_tokens); }

size_t early_exit_decode_workspace_floats(int batch, int n_query_heads, int head_dim,
                                          int max_kv_length) {
  const int max_blocks = (std::max(max_kv_length, 1) + kTile - 1) / kTile + 1;
  return size_t(batch) * n_query_heads * max_blocks * (head_dim + 2);
}

int early_exit_chunk_blocks(const EarlyExitDecodeArgs& args) { return walk_layout(args).chunk_blocks; }

int early_exit_decider_blocks(const EarlyExitDecodeArgs& args) { return walk_layout(args).decider_blocks; }

int early_exit_splits(const EarlyExitDecodeArgs& args) { return walk_layout(args).n_chunks; }

void early_exit_decode(const EarlyExitDecodeArgs& args, cudaStream_t stream) {
  const DecodeAttentionArgs& a = args.attention;
  if (a.batch <= 0) return;
  const int group = a.n_query_heads / std::max(1, a.n_kv_heads);
  if (a.indices == nullptr && group > kMaxRows)
    throw std::invalid_argument("early_exit_decode: GQA group " + std::to_string(group) +
                                " unsupported (at most 8 query heads per KV head)");
  if (args.options.sink_tokens < 0 || args.options.sink_tokens > kTile)
    throw std::invalid_argument("early_exit_decode: sink_tokens must be in [0, 64], got " +
                                std::to_string(args.options.sink_tokens));
  if (args.options.patience < 1)
    throw std::invalid_argument("early_exit_decode: patience must be >= 1");
  if (args.walker_state == nullptr || a.workspace == nullptr)
    throw std::invalid_argument("early_exit_decode: walker_state and workspace are required");
  if (args.chunk_blocks < 0 || args.decider_blocks < 0)
    throw std::invalid_argument("early_exit_decode: chunk_blocks and decider_blocks must be >= 0 (0 = automatic)");
  check_decode_append(a, "early_exit_decode");
  const WalkLayout layout = walk_layout(args);
  switch (a.head_dim) {
    case 64: launch_for_dim<64>(args, layout, stream); break;
    case 128: launch_for_dim<128>(args, layout, stream); break;
    default:
      throw std::invalid_argument("early_exit_decode: head_dim " + std::to_string(a.head_dim) +
                                  " unsupported (64 or 128)");
  }
}

}  // namespace kvb::cuda
