// The split-KV prefill (PrefillKernel::kSplitKv): a few queries after a long prefix, DropKV's
// window forward (W = 8 queries after up to 128K keys), with GQA. CPU twin: kernels/cpu/attention.h
// (prefill_attention). Test: the split_kv rows of tests/cuda/backend_ops_attention.h. Benchmark:
// tests/benchmarks/cuda_dropkv_bench.cc (window_ms against window_read_bound_ms).
//
// The prefill kernel gives each query head one block, so a few blocks stream every key; running
// each query as a decode query of its own causal length spreads the keys over the GPU but reads
// every KV head's keys and values once per query (W times). Here the W x group rows of KV head h,
// row t * group + a being window query t with query head h * group + a, share one read:
// 1. Block (split, pass, KV head) streams the split's 64-key K/V tiles through a 3-stage cp.async
//    ring and holds up to 64 of the head's rows (a pass) as 1, 2 or 4 m16n8k16 row tiles. More
//    rows take more passes: blocks of their own, next to each other in the grid so that they stream
//    the same tiles at about the same time and the second read can come from L2. With fewer than 4
//    row tiles the 4 warps split each key tile between them (warp w: row tile w % tiles, keys of
//    slice w / tiles), so that every warp has tensor-core work. S = Q K^T and O += P V on the
//    tensor cores, the online softmax in the log2 domain in f32 with P rounded to bf16 for P V
//    (online_softmax.cuh, as the prefill and decode kernels); the causal mask (query t sees keys
//    0 .. query_offset + t) matters only in the splits holding the last W keys. The warps' states
//    merge in shared memory and the block writes one partial (max, sum, acc[D]) per row to the
//    workspace (split_merge.cuh).
// 2. One block per (row, KV head) merges that row's partials in split order into `out` and `lse`.
// No host tables to upload (nothing but launches, so the path can be captured in a graph) and no
// atomics: the result is deterministic.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"
#include "kernels/cuda/online_softmax.cuh"
#include "kernels/cuda/split_merge.cuh"

namespace kvb::cuda {

// The path's reach: W x group rows up to 256 (4 passes). A longer window is a prefill chunk.
constexpr int kSplitKvMaxQueries = 16;
constexpr int kSplitKvMaxGroup = 16;

bool split_kv_applies(const PrefillAttentionArgs& args) {
  if (args.n_kv_heads <= 0 || args.n_query_heads % args.n_kv_heads != 0) return false;
  const int group = args.n_query_heads / args.n_kv_heads;
  return args.n_queries >= 1 && args.n_queries <= kSplitKvMaxQueries && group >= 1 &&
         group <= kSplitKvMaxGroup && (args.head_dim == 64 || args.head_dim == 128);
}

namespace {

constexpr int kThreads = 128;
constexpr int kTileKeys = 64;
constexpr int kStages = 3;  // as the dense decode kernel's one-wave ring (decode_attention.cu)
constexpr int kMaxRowsPerPass = 64;  // 4 row tiles of 16

// How one call cuts the work: each KV head's `rows` rows in `passes` passes of at most
// rows_per_pass rows (balanced, so the last pass is not a sliver), held as row_tiles mma tiles;
// the keys in n_chunks splits of `chunk` keys.
struct SplitKvLayout {
  int rows = 0;
  int passes = 0;
  int rows_per_pass = 0;
  int row_tiles = 0;  // 1, 2 or 4
  int chunk = 0;
  int n_chunks = 0;
};

template <int D, int kRowTiles>
__global__ void __launch_bounds__(kThreads)
    split_kv_partial_kernel(PrefillAttentionArgs args, SplitKvLayout layout, float* partials) {
  constexpr int kRows = 16 * kRowTiles;
  constexpr int kSlices = 4 / kRowTiles;  // warps sharing a row tile, each on a slice of the keys
  constexpr int kSliceKeys = kTileKeys / kSlices;
  constexpr int kSliceTiles = kSliceKeys / 8;  // 8-key n-tiles of a slice
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kRows][D]
  __nv_bfloat16* s_k = s_q + kRows * D;                             // [kStages][64][D]
  __nv_bfloat16* s_v = s_k + kStages * kTileKeys * D;               // [kStages][64][D]

  const int pass = blockIdx.x % layout.passes;
  const int chunk = blockIdx.x / layout.passes;
  const int kv_head = blockIdx.y;
  const int group = args.n_query_heads / args.n_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row_tile = warp % kRowTiles, slice = warp / kRowTiles;
  const int row0 = pass * layout.rows_per_pass;  // the pass's first row of the head
  const int pass_rows = min(layout.rows_per_pass, layout.rows - row0);
  const int n_keys = args.query_offset + args.n_queries;
  const int begin = chunk * layout.chunk;
  const int end = min(n_keys, begin + layout.chunk);
  const int n_tiles = (end - begin + kTileKeys - 1) / kTileKeys;  // >= 1: begin < n_keys
  const __nv_bfloat16* k_head = args.k + kv_head * args.kv_head_stride;
  const __nv_bfloat16* v_head = args.v + kv_head * args.kv_head_stride;

  // The queries and the newest keys may be the predecessor's output.
  wait_for_predecessor();
  allow_successor_launch();
  // Rows past the pass are zero-filled: their logits are finite, and they are never stored.
  load_rows<D>(s_q, args.q, kRows, pass_rows, [&](int r) {
    const int row = row0 + r;
    return int64_t(row / group) * args.q_row_stride + int64_t(kv_head * group + row % group) * D;
  });
  auto load_kv_tile = [&](int tile) {  // into its ring slot; one commit group per tile, even empty
    if (tile < n_tiles) {
      const int first = begin + tile * kTileKeys;
      const int slot = tile % kStages;
      const int valid = min(kTileKeys, end - first);  // the rest zero-filled, and masked below
      load_tile<D>(s_k + slot * kTileKeys * D, k_head + int64_t(first) * D, D, kTileKeys, valid);
      load_tile<D>(s_v + slot * kTileKeys * D, v_head + int64_t(first) * D, D, kTileKeys, valid);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int tile = 0; tile + 1 < kStages; ++tile) load_kv_tile(tile);  // tile 0 with the queries

  // The last key each of this thread's rows (g and g + 8 of its row tile) takes from this split:
  // query t sees keys up to query_offset + t, and keys from `end` on are the next split's (a
  // padding row takes the pass's last row's). Keys below `seen_by_all` are visible to every row, so
  // tiles wholly below it skip the mask.
  int last_key[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + min(row_tile * 16 + g + 8 * r, pass_rows - 1);
    last_key[r] = min(args.query_offset + row / group, end - 1);
  }
  const int seen_by_all = min(end, args.query_offset + 1);

  constexpr int kSteps = D / 16, kDimTiles = D / 8;
  uint32_t q_frag[kSteps][4];
  float o[kDimTiles][4], row_max[2], row_sum[2];
  zero_tiles(o);
  start_rows(row_max, row_sum);
  const float scale_log2 = args.scale * 1.4426950408889634f;

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile % kStages;
    load_kv_tile(tile + kStages - 1);  // into the slot the previous iteration finished with
    cp_async_wait<kStages - 1>();      // this tile's group (and the queries') has landed
    __syncthreads();
    if (tile == 0) load_query_fragments<D>(q_frag, s_q, row_tile * 16, lane);
    const __nv_bfloat16* k_tile = s_k + buf * kTileKeys * D;
    const __nv_bfloat16* v_tile = s_v + buf * kTileKeys * D;
    const int slice_row0 = slice * kSliceKeys;  // the slice's first row within the tile
    float s[kSliceTiles][4];
    zero_tiles(s);
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
#pragma unroll
      for (int np = 0; np < kSliceTiles / 2; ++np)
        mma_query_keys16<D>(s[2 * np], s[2 * np + 1], q_frag[ks], k_tile, slice_row0 + np * 16, ks);
    const int tile_key0 = begin + tile * kTileKeys;
    const bool masked = tile_key0 + kTileKeys > seen_by_all;  // the same for the whole block
    const int key0 = tile_key0 + slice_row0;
#pragma unroll
    for (int nt = 0; nt < kSliceTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t + (e & 1);
        const float value = s[nt][e] * scale_log2;
        s[nt][e] = masked && key > last_key[e >> 1] ? -INFINITY : value;
      }
    const SoftmaxTileStep step = online_softmax_tile<TileSum::kEach>(s, row_max, row_sum);
    rescale_rows(o, step.correction);
#pragma unroll
    for (int kk = 0; kk < kSliceTiles / 2; ++kk) {
      uint32_t p_frag[4];
      probability_fragment(s, kk, p_frag);
      mma_probs_values16<D>(o, p_frag, v_tile, slice_row0 + kk * 16);
    }
    __syncthreads();
  }

  // The ring is free (every copy landed; the loads past the last tile were empty groups).
  store_split_partials<D, kThreads, kRowTiles>(
      o, row_max, row_sum, reinterpret_cast<float*>(s_k), pass_rows, [&](int r) {
        return partials +
               ((int64_t(kv_head) * layout.rows + row0 + r) * layout.n_chunks + chunk) * (D + 2);
      });
}

// Row `blockIdx.x` of KV head `blockIdx.y`: every split wrote a partial of it (max -inf where the
// row sees none of the split's keys), merged in split order.
template <int D>
__global__ void split_kv_merge_kernel(PrefillAttentionArgs args, SplitKvLayout layout,
                                      const float* partials) {
  wait_for_predecessor();
  allow_successor_launch();
  const int row = blockIdx.x, kv_head = blockIdx.y;
  const int group = args.n_query_heads / args.n_kv_heads;
  const int query = row / group, q_head = kv_head * group + row % group;
  const float* partial =
      partials + (int64_t(kv_head) * layout.rows + row) * layout.n_chunks * (D + 2);
  merge_split_partials<D>(partial, layout.n_chunks, layout.n_chunks,
                          args.out + query * args.out_row_stride + q_head * D,
                          args.lse ? args.lse + int64_t(q_head) * args.n_queries + query : nullptr);
}

template <int D, int kRowTiles>
size_t partial_shared_bytes() {
  // The ring and the queries, or the warps' merge (store_split_partials) over the ring.
  return std::max<size_t>((16 * kRowTiles + 2 * kStages * kTileKeys) * D * sizeof(__nv_bfloat16),
                          (4 * 16 * D + 2 * 4 * 16) * sizeof(float));
}

// Blocks of the partial kernel resident per SM (the split count fills them once); also opts the
// kernel into its dynamic shared memory, once.
template <int D, int kRowTiles>
int partial_blocks_per_sm() {
  static const int blocks =
      resident_blocks_per_sm(split_kv_partial_kernel<D, kRowTiles>, kThreads,
                             partial_shared_bytes<D, kRowTiles>(), "split_kv_partial_kernel");
  return blocks;
}

// fn(std::integral_constant<int, kRowTiles>) for the layout's row tiles (1, 2 or 4).
template <typename Fn>
decltype(auto) with_row_tiles(int row_tiles, Fn&& fn) {
  return with_constant<1, 2, 4>(row_tiles, "prefill_attention (split-KV): row tiles",
                                std::forward<Fn>(fn));
}

// fn(std::integral_constant<int, D>) for head_dim 64 or 128 (split_kv_applies checked it).
template <typename Fn>
decltype(auto) with_head_dim(int head_dim, Fn&& fn) {
  return with_constant<64, 128>(head_dim, "prefill_attention (split-KV): head_dim",
                                std::forward<Fn>(fn));
}

// One wave: splits give every SM as many blocks as are resident at once (the dense decode's rule,
// results/gpu-kernel-tuning.md §4.3), unless the caller fixes the split size.
template <int D>
SplitKvLayout split_kv_layout(const PrefillAttentionArgs& args) {
  static thread_local int sm_count = device_info().sm_count;
  SplitKvLayout layout;
  layout.rows = args.n_queries * (args.n_query_heads / args.n_kv_heads);
  layout.passes = (layout.rows + kMaxRowsPerPass - 1) / kMaxRowsPerPass;
  layout.rows_per_pass = (layout.rows + layout.passes - 1) / layout.passes;
  const int tiles = (layout.rows_per_pass + 15) / 16;
  layout.row_tiles = tiles <= 2 ? tiles : 4;
  const int resident = with_row_tiles(layout.row_tiles, [](auto tiles) {
    return partial_blocks_per_sm<D, decltype(tiles)::value>();
  });
  const int n_keys = args.query_offset + args.n_queries;
  if (args.split_kv_chunk_keys > 0) {
    layout.chunk = args.split_kv_chunk_keys;
  } else {
    const int splits = std::max(1, resident * sm_count / (args.n_kv_heads * layout.passes));
    const int chunk = (n_keys + splits - 1) / splits;
    layout.chunk = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
  }
  layout.n_chunks = (n_keys + layout.chunk - 1) / layout.chunk;
  return layout;
}

template <int D>
void launch_split_kv(const PrefillAttentionArgs& args, cudaStream_t stream) {
  const SplitKvLayout layout = split_kv_layout<D>(args);
  float* partials = static_cast<float*>(args.workspace);
  with_row_tiles(layout.row_tiles, [&](auto tiles) {
    constexpr int kRowTiles = decltype(tiles)::value;
    launch_overlapped(split_kv_partial_kernel<D, kRowTiles>,
                      dim3(layout.n_chunks * layout.passes, args.n_kv_heads), kThreads,
                      partial_shared_bytes<D, kRowTiles>(), stream, "split_kv_partial_kernel", args,
                      layout, partials);
  });
  launch_overlapped(split_kv_merge_kernel<D>, dim3(layout.rows, args.n_kv_heads), D, 0, stream,
                    "split_kv_merge_kernel", args, layout, partials);
}

void check_split_kv(const PrefillAttentionArgs& args) {
  if (!split_kv_applies(args))
    throw std::invalid_argument(
        "prefill_attention: the split-KV path takes at most " + std::to_string(kSplitKvMaxQueries) +
        " queries, a GQA group of at most " + std::to_string(kSplitKvMaxGroup) +
        " and head_dim 64 or 128 (got " + std::to_string(args.n_queries) + " queries, " +
        std::to_string(args.n_query_heads) + " query heads over " +
        std::to_string(args.n_kv_heads) + " KV heads, head_dim " + std::to_string(args.head_dim) +
        ")");
}

}  // namespace

void prefill_attention_split_kv(const PrefillAttentionArgs& args, cudaStream_t stream) {
  if (args.workspace == nullptr)
    throw std::invalid_argument(
        "prefill_attention: the split-KV path needs a workspace of "
        "prefill_split_kv_workspace_bytes(args) bytes");
  check_split_kv(args);
  with_head_dim(args.head_dim,
                [&](auto dim) { launch_split_kv<decltype(dim)::value>(args, stream); });
}

size_t prefill_split_kv_workspace_bytes(const PrefillAttentionArgs& args) {
  check_split_kv(args);
  const SplitKvLayout layout = with_head_dim(
      args.head_dim, [&](auto dim) { return split_kv_layout<decltype(dim)::value>(args); });
  return size_t(args.n_kv_heads) * layout.rows * layout.n_chunks * (args.head_dim + 2) *
         sizeof(float);
}

}  // namespace kvb::cuda
