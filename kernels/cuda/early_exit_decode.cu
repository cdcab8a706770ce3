// ART decode attention, part 1: the walk (split-KV in walk order, a partial state per walk block)
// and the host side. Semantics, layout and limits: kernels/cuda/early_exit_decode.h. Part 2, the
// decision: early_exit_decide.cu. CPU twin: kernels/cpu/early_exit_decode.cc.
//
// Per tile (64 entries of one walk block): cp.async into a ring of 3 tiles and the mma layout of
// decode_mma_kernel (each warp 16 keys, rows = the walker's query heads); after the tile, the
// warps' running states are merged through the tile's shared memory into the block's slot (R_b).
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/decode_append.cuh"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/early_exit_decode.h"
#include "kernels/cuda/early_exit_layout.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"
#include "kernels/cuda/online_softmax.cuh"

namespace kvb::cuda {
namespace early_exit {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;
constexpr int kWarps = 4;
// The K/V ring: 3 tiles, two in flight while one is computed (as decode_attention.cu's one-wave
// dense kernel).
constexpr int kStages = 3;
constexpr float kLog2e = 1.4426950408889634f;
// Walk blocks per decision segment, before rounding to the chunk: the decide blocks' sequential
// part (a merge, three sums over the head dimension and the test per block) against the prefix
// each folds (one aggregate per earlier segment); both are chains of L2 round trips.
constexpr int kSegmentTarget = 16;

__device__ __forceinline__ uint32_t load_pair(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <int D>
struct WalkScratch {
  float stats[kWarps][kMaxRows][3];  // per warp and head: running max (log2), sum, this tile's sum
  int last_arrival;
  bf16 query[kMaxRows * D];  // with the step's append: the rotated queries
};
// Dynamic shared memory: K and V tiles [kStages][64][D] each, the bias [kStages][64] (index mode),
// then the scratch.
template <int D>
constexpr size_t kTileBytes = kStages*(2 * kTile * D * sizeof(bf16) + kTile * sizeof(float));
template <int D>
constexpr size_t kSharedBytes = kTileBytes<D> + sizeof(WalkScratch<D>);

// The state of every warp after walk block `block` (each warp saw its 16 keys of each tile so far)
// merged into the block's slot, through `staged` (the finished tile's K buffer: [kWarps][kMaxRows]
// [D] floats, 128 D bytes, exactly the tile's K). Called by the whole thread block after the
// barrier that ends the tile's compute; ends with the slot written by this thread's items.
template <int D>
__device__ __forceinline__ void store_block_state(const float (&o)[D / 8][4], float row_max,
                                                  float row_sum, float tile_sum, float* staged,
                                                  WalkScratch<D>& scratch, int rows,
                                                  const Workspace<D>& ws, int b, int head0,
                                                  int block) {
  constexpr int kDimTiles = D / 8, kQuads = D / 4;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const float sum = quad_sum(row_sum), tile = quad_sum(tile_sum);  // the quad's row, whole
  if (g < rows) {
    if (t == 0) {
      scratch.stats[warp][g][0] = row_max;
      scratch.stats[warp][g][1] = sum;
      scratch.stats[warp][g][2] = tile;
    }
    float* row = staged + (warp * kMaxRows + g) * D + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt)
      *reinterpret_cast<float2*>(row + dt * 8) = make_float2(o[dt][0], o[dt][1]);
  }
  __syncthreads();
  for (int item = tid; item < rows * kQuads; item += kThreads) {
    const int r = item / kQuads, quad = item % kQuads;
    float best = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) best = fmaxf(best, scratch.stats[w][r][0]);
    float total = 0.f, added = 0.f;
    float4 acc = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = best == -INFINITY ? 0.f : exp2f(scratch.stats[w][r][0] - best);
      total += scratch.stats[w][r][1] * weight;
      added += scratch.stats[w][r][2] * weight;
      const float4 part = reinterpret_cast<const float4*>(staged + (w * kMaxRows + r) * D)[quad];
      acc.x += part.x * weight;
      acc.y += part.y * weight;
      acc.z += part.z * weight;
      acc.w += part.w * weight;
    }
    float* slot = ws.slot(b, head0 + r, block);
    if (quad == 0) *reinterpret_cast<float4*>(slot) = make_float4(best, total, added, 0.f);
    reinterpret_cast<float4*>(slot + 4)[quad] = acc;
  }
}

// After the walk of a chunk: the arrival on the segment's counter; the last walk block of the
// segment folds the finals of the segment's chunks (their last blocks' slots) into its aggregate.
// Other blocks' slots are read from L2 after the fence (the classic last-block pattern: every
// thread fences its own stores before the barrier that precedes the arrival).
template <int D>
__device__ __forceinline__ void finish_segment(const EarlyExitDecodeArgs& ea,
                                               const WalkLayout& layout, const Walker& wk,
                                               const Workspace<D>& ws, WalkScratch<D>& scratch,
                                               int blocks) {
  constexpr int kQuads = D / 4;
  const int tid = threadIdx.x, b = blockIdx.z;
  const int chunks_per_segment = layout.segment_blocks / layout.chunk_blocks;
  const int segment = blockIdx.x / chunks_per_segment;
  const int chunk0 = segment * chunks_per_segment;
  const int arrivals = min(chunks_per_segment, layout.n_chunks - chunk0);
  int* counter = ea.walker_state + int64_t(wk.index) * kStateWords + kSegmentArrivals + segment;
  __threadfence();
  __syncthreads();
  if (tid == 0) scratch.last_arrival = atomicAdd(counter, 1) == arrivals - 1;
  __syncthreads();
  if (!scratch.last_arrival) return;
  __threadfence();
  if (tid == 0) *counter = 0;  // every block of this segment has arrived: ready for the next call
  const int C = layout.chunk_blocks;
  const int chunk_end = min(chunk0 + chunks_per_segment, (blocks + C - 1) / C);
  for (int item = tid; item < wk.rows * kQuads; item += kThreads) {
    const int r = item / kQuads, quad = item % kQuads;
    RowState state;
#pragma unroll 8  // the loads of 8 finals in flight at once
    for (int k = chunk0; k < chunk_end; ++k) {
      const float* final_slot = ws.slot(b, wk.head0 + r, min((k + 1) * C, blocks) - 1);
      merge_into(state, __ldcg(final_slot), __ldcg(final_slot + 1),
                 __ldcg(reinterpret_cast<const float4*>(final_slot + 4) + quad));
    }
    float* aggregate = ws.aggregate(b, wk.head0 + r, segment);
    if (quad == 0) *reinterpret_cast<float4*>(aggregate) = make_float4(state.m, state.l, 0.f, 0.f);
    reinterpret_cast<float4*>(aggregate + 4)[quad] = state.acc;
  }
}

template <int D, bool kIndexed>
__global__ void __launch_bounds__(kThreads, 2)
    early_exit_walk_kernel(EarlyExitDecodeArgs ea, WalkLayout layout, bool early_tile) {
  // All shared memory is dynamic, tiles first (128-byte aligned for the copies and the swizzle).
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& scratch = *reinterpret_cast<WalkScratch<D>*>(smem_raw + kTileBytes<D>);
  const DecodeAttentionArgs& args = ea.attention;
  const EarlyExitDecodeOptions& opt = ea.options;
  bf16* s_k = reinterpret_cast<bf16*>(smem_raw);                        // [kStages][64][D]
  bf16* s_v = s_k + kStages * kTile * D;                                // [kStages][64][D]
  float* s_bias = reinterpret_cast<float*>(s_v + kStages * kTile * D);  // [kStages][64]

  const int b = blockIdx.z;
  const int first = blockIdx.x * layout.chunk_blocks;
  // The walk's extent follows the walker's length: the recent-first blocks are cut from its end.
  Walker wk;
  int sinks = 0, n_tiles = 0, blocks = 0;
  auto follow_walker = [&] {
    wk = walker_of<kIndexed>(args, blockIdx.y, b);
    sinks = clamp_int(opt.sink_tokens, 0, wk.n);
    blocks = walk_blocks(wk.n, opt.sink_tokens);
    n_tiles = min(blocks, first + layout.chunk_blocks) - first;
  };
  const int tid = threadIdx.x;
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
    cp_async_commit();
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
  const int n_before_wait = wk.n;
  follow_walker();
  // With the step's append (dense walks) the queries are rotated into shared memory first, so
  // their loads leave before anything waits on the walker's length.
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
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  constexpr int kSteps = D / 16, kDimTiles = D / 8;
  // Query fragments, held in registers for the whole walk: row g holds columns 2t, 2t+1 and
  // 2t+8, 2t+9; rows 8..15 of the mma tile stay zero (at most 8 heads).
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
  if (!appends) load_query();

  if (tile0_early && wk.n != n_before_wait) {
    cp_async_wait<0>();  // this thread's copies land before it refills the same slot
    tile0_early = false;
  }
  const Workspace<D> ws{args.workspace, args.batch, args.n_query_heads, layout.slots};
  if (n_tiles > 0) {
    if (appends) {
      // The chunk whose walk block holds the new entry (the sink block while the cache is within
      // the sinks, else the most recent block) writes it before its first tile copy.
      const int stored = wk.n - 1;
      const int newest = stored < sinks ? 0 : (sinks > 0 ? 1 : 0);
      if (first <= newest && newest < first + n_tiles)
        write_new_entry<D, kThreads>(append, rope, qkv_row, args.n_query_heads, args.n_kv_heads,
                                     blockIdx.y, wk.kv_row0 + stored);
      __syncthreads();  // the tile copies read the new row; the rotated queries are in place
    }
    if (!tile0_early) issue(first, 0);
#pragma unroll
    for (int ahead = 1; ahead + 1 < kStages; ++ahead) {  // one commit group per tile, even empty
      if (ahead < n_tiles)
        issue(first + ahead, ahead);
      else
        cp_async_commit();
    }
    if (appends) load_query();

    // Per warp (its 16 keys of every tile) online softmax; row_sum is this thread's share.
    float o[kDimTiles][4], row_max[2], row_sum[2];
    zero_tiles(o);
    start_rows(row_max, row_sum);
    const float scale_log2 = args.scale * kLog2e;
    for (int i = 0; i < n_tiles; ++i) {
      const int buf = i % kStages;
      const int w = first + i;
      cp_async_wait<kStages - 2>();  // this tile's group has landed
      // Every warp is done with the previous tile and its merge (which read that tile's slot),
      // so the slot can take the tile kStages - 1 ahead.
      __syncthreads();
      if (i + kStages - 1 < n_tiles)
        issue(w + kStages - 1, (i + kStages - 1) % kStages);
      else
        cp_async_commit();
      int begin, end;
      block_rows(w, wk.n, sinks, begin, end);
      const int count = end - begin;
      const bf16* k_tile = s_k + buf * kTile * D;
      const bf16* v_tile = s_v + buf * kTile * D;

      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        const uint32_t a[4] = {q_frag[ks][0], 0u, q_frag[ks][1], 0u};
        mma_query_keys16<D>(s[0], s[1], a, k_tile, warp * 16, ks);
      }
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
        }
      const SoftmaxTileStep step = online_softmax_tile<TileSum::kTileFirst>(s, row_max, row_sum);
      rescale_rows(o, step.correction);
      uint32_t p_frag[4];
      probability_fragment(s, 0, p_frag);
      mma_probs_values16<D>(o, p_frag, v_tile, warp * 16);
      __syncthreads();  // every warp is done with this tile's K and V
      store_block_state<D>(o, row_max[0], row_sum[0], step.tile_sum[0],
                           reinterpret_cast<float*>(s_k + buf * kTile * D), scratch, wk.rows, ws, b,
                           wk.head0, w);
    }
  }
  cp_async_wait<0>();  // the trailing groups (and a dropped early copy) land before the exit
  finish_segment<D>(ea, layout, wk, ws, scratch, blocks);
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
  return with_constant<64, 128>(a.head_dim, "early_exit_decode: head_dim", [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    return indexed ? walk_blocks_per_sm<D, true>() : walk_blocks_per_sm<D, false>();
  });
}

template <int D, bool kIndexed>
void launch_walk(const EarlyExitDecodeArgs& ea, const WalkLayout& layout, cudaStream_t stream) {
  const DecodeAttentionArgs& a = ea.attention;
  walk_blocks_per_sm<D, kIndexed>();  // opts the kernel into its shared memory
  const int axis = kIndexed ? a.n_query_heads : a.n_kv_heads;
  launch_overlapped(early_exit_walk_kernel<D, kIndexed>, dim3(layout.n_chunks, axis, a.batch),
                    kThreads, kSharedBytes<D>, stream, "early_exit_walk_kernel", ea, layout,
                    early_tile_enabled());
}

void launch(const EarlyExitDecodeArgs& ea, const WalkLayout& layout, cudaStream_t stream) {
  const bool indexed = ea.attention.indices != nullptr;
  with_constant<64, 128>(ea.attention.head_dim, "early_exit_decode: head_dim", [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    indexed ? launch_walk<D, true>(ea, layout, stream) : launch_walk<D, false>(ea, layout, stream);
  });
  launch_decide(ea, layout, stream);
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The walk's chunk is the plain kernel's (decode_attention.cu, choose_chunk: as many thread blocks
// per SM as fit at once over all walkers, in dense mode no more), in walk blocks. A segment is the
// multiple of the chunk nearest above kSegmentTarget blocks, and at least what kMaxSegments
// segments need.
WalkLayout walk_layout(const EarlyExitDecodeArgs& args) {
  const DecodeAttentionArgs& a = args.attention;
  const int max_blocks = std::max(1, walk_blocks(a.max_kv_length, args.options.sink_tokens));
  WalkLayout layout;
  if (args.chunk_blocks > 0) {
    layout.chunk_blocks = args.chunk_blocks;
  } else {
    const int walkers = std::max(1, early_exit_walkers(a));
    const int slots = walk_resident_per_sm(a) * sm_count();
    const bool dense = a.indices == nullptr;
    const int splits = std::max(1, dense ? slots / walkers : ceil_div(slots, walkers));
    layout.chunk_blocks = std::max(1, ceil_div(max_blocks, splits));
  }
  layout.n_chunks = ceil_div(max_blocks, layout.chunk_blocks);
  const int target = std::max(args.segment_blocks > 0 ? args.segment_blocks : kSegmentTarget,
                              ceil_div(max_blocks, kMaxSegments));
  layout.segment_blocks = ceil_div(target, layout.chunk_blocks) * layout.chunk_blocks;
  layout.n_segments = ceil_div(max_blocks, layout.segment_blocks);
  layout.slots = slot_count(a.max_kv_length);
  return layout;
}

}  // namespace
}  // namespace early_exit

int early_exit_walkers(const DecodeAttentionArgs& args) {
  return args.batch * (args.indices != nullptr ? args.n_query_heads : args.n_kv_heads);
}

int early_exit_walk_blocks(int n, int sink_tokens) {
  return early_exit::walk_blocks(n, sink_tokens);
}

size_t early_exit_decode_workspace_floats(int batch, int n_query_heads, int head_dim,
                                          int max_kv_length) {
  return early_exit::workspace_floats(batch, n_query_heads, head_dim, max_kv_length);
}

int early_exit_chunk_blocks(const EarlyExitDecodeArgs& args) {
  return early_exit::walk_layout(args).chunk_blocks;
}

int early_exit_splits(const EarlyExitDecodeArgs& args) {
  return early_exit::walk_layout(args).n_chunks;
}

int early_exit_segment_blocks(const EarlyExitDecodeArgs& args) {
  return early_exit::walk_layout(args).segment_blocks;
}

int early_exit_segments(const EarlyExitDecodeArgs& args) {
  return early_exit::walk_layout(args).n_segments;
}

void early_exit_decode(const EarlyExitDecodeArgs& args, cudaStream_t stream) {
  const DecodeAttentionArgs& a = args.attention;
  if (a.batch <= 0) return;
  const int group = a.n_query_heads / std::max(1, a.n_kv_heads);
  if (a.indices == nullptr && group > early_exit::kMaxRows)
    throw std::invalid_argument("early_exit_decode: GQA group " + std::to_string(group) +
                                " unsupported (at most 8 query heads per KV head)");
  if (args.options.sink_tokens < 0 || args.options.sink_tokens > early_exit::kTile)
    throw std::invalid_argument("early_exit_decode: sink_tokens must be in [0, 64], got " +
                                std::to_string(args.options.sink_tokens));
  if (args.options.patience < 1)
    throw std::invalid_argument("early_exit_decode: patience must be >= 1");
  if (args.options.decision_window < 0)
    throw std::invalid_argument("early_exit_decode: decision_window must be >= 0 (0 = anywhere)");
  if (a.head_dim != 64 && a.head_dim != 128)
    throw std::invalid_argument("early_exit_decode: head_dim " + std::to_string(a.head_dim) +
                                " unsupported (64 or 128)");
  if (args.walker_state == nullptr || a.workspace == nullptr)
    throw std::invalid_argument("early_exit_decode: walker_state and workspace are required");
  if (args.chunk_blocks < 0 || args.segment_blocks < 0)
    throw std::invalid_argument(
        "early_exit_decode: chunk_blocks and segment_blocks must be >= 0 (0 = automatic)");
  check_decode_append(a, "early_exit_decode");
  early_exit::launch(args, early_exit::walk_layout(args), stream);
}

}  // namespace kvb::cuda
