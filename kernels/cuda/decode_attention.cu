// Flash-decoding over a ragged per-head KV store, with an index-list variant for decode selectors.
// CPU twin: kernels/cpu/attention.h (decode_attention). Test: tests/cuda/attention_test.cc.
//
// Dense mode (tensor cores): block (chunk, KV head, sequence) streams 64-key K/V tiles through
// shared memory with cp.async (double-buffered) and treats the GQA group's query heads as the 16
// rows of an mma tile, so each K/V row is read once for the whole group and the arithmetic stays
// far below the memory time. Each of the 4 warps owns 16 keys of every tile with its own online
// softmax; the warps merge through shared memory.
// Index mode (decode selectors): block (chunk, query head, sequence) walks that head's index list;
// D/8 threads share one key (16-byte loads), four keys in flight per thread group. When the group's
// heads share one list (shared_group_lists), the dense kernel runs instead with its tiles gathered
// through the list: each row read once for the group, ~1 tile per block, all in one wave (faster
// than the per-head walk: results/gpu-kernel-tuning.md §4.1).
// Both write a partial (max, sum, acc[D]) per chunk that a second kernel merges across chunks.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/decode_append.cuh"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"
#include "kernels/cuda/online_softmax.cuh"
#include "kernels/cuda/split_merge.cuh"

namespace kvb::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGroup = 8;
constexpr int kUnroll = 4;

// Partial results: per (sequence*Hq + head, chunk): [max, sum, acc[D]].
template <int D, int G>
__global__ void __launch_bounds__(kThreads)
    decode_partial_kernel(DecodeAttentionArgs args, int chunk_size, int n_chunks) {
  wait_for_predecessor();
  allow_successor_launch();
  constexpr int kLanesPerKey = D / 8;
  constexpr int kKeySlots = kThreads / kLanesPerKey;
  const bool indexed = args.indices != nullptr;
  const int chunk = blockIdx.x;
  const int b = blockIdx.z;
  const int group = args.n_query_heads / args.n_kv_heads;
  // In index mode the block serves one query head; otherwise the G heads of one KV head.
  const int head0 = indexed ? blockIdx.y : blockIdx.y * group;
  const int kv_head = indexed ? blockIdx.y / group : blockIdx.y;
  const int heads = indexed ? 1 : group;

  const int slot = threadIdx.x / kLanesPerKey;
  const int sub = threadIdx.x % kLanesPerKey;

  const int64_t kv_row0 = args.kv_offset[b * args.n_kv_heads + kv_head];
  int count = args.kv_length[b * args.n_kv_heads + kv_head];
  const int32_t* index_list = nullptr;
  const float* bias_list = nullptr;
  if (indexed) {
    const int64_t off = args.index_offset[b * args.n_query_heads + head0];
    count = args.index_count[b * args.n_query_heads + head0];
    index_list = args.indices + off;
    if (args.logit_bias) bias_list = args.logit_bias + off;
  }
  const int begin = chunk * chunk_size;
  const int end = min(count, begin + chunk_size);

  float q[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (h < heads) {
      const int4 raw = *reinterpret_cast<const int4*>(args.q + b * args.q_seq_stride +
                                                      (head0 + h) * D + sub * 8);
      to_float8(raw, q[h]);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[h][i] *= args.scale * 1.4426950408889634f;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[h][i] = 0.f;
    }
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.f;
  }

  // All slots iterate the same number of times (warp-uniform trip count) for the shuffles.
  for (int base0 = begin; base0 < end; base0 += kKeySlots * kUnroll) {
    const int base = base0 + slot;
    int4 kr[kUnroll], vr[kUnroll];
    bool live[kUnroll];
    float bias[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kKeySlots;
      live[u] = i < end;
      bias[u] = 0.f;
      if (live[u]) {
        const int row = indexed ? index_list[i] : i;
        if (bias_list) bias[u] = bias_list[i] * 1.4426950408889634f;
        kr[u] = *reinterpret_cast<const int4*>(args.k + (kv_row0 + row) * D + sub * 8);
        vr[u] = *reinterpret_cast<const int4*>(args.v + (kv_row0 + row) * D + sub * 8);
      }
    }
    // Every lane runs the shuffles (a key slot past the end computes on zeros and is then
    // skipped), so no shuffle ever waits on a lane that left the loop body.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8], vf[8];
      if (live[u]) {
        to_float8(kr[u], kf);
        to_float8(vr[u], vf);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) kf[i] = vf[i] = 0.f;
      }
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot += q[h][i] * kf[i];
#pragma unroll
        for (int off = kLanesPerKey / 2; off > 0; off /= 2)
          dot += __shfl_xor_sync(0xffffffff, dot, off, kLanesPerKey);
        if (!live[u] || h >= heads) continue;
        dot += bias[u];
        const float new_max = fmaxf(m[h], dot);
        const float correction = exp2f(m[h] - new_max);
        const float p = exp2f(dot - new_max);
        m[h] = new_max;
        l[h] = l[h] * correction + p;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] = acc[h][i] * correction + p * vf[i];
      }
    }
  }

  // Merge the key slots of the block through shared memory, then write the chunk's partial.
  __shared__ float s_m[kKeySlots][kMaxGroup];
  __shared__ float s_l[kKeySlots][kMaxGroup];
  __shared__ float s_acc[kKeySlots][kMaxGroup][D];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (sub == 0) {
      s_m[slot][h] = m[h];
      s_l[slot][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) s_acc[slot][h][sub * 8 + i] = acc[h][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < heads * D; idx += kThreads) {
    const int h = idx / D;
    const int dim = idx % D;
    float best = -INFINITY;
    for (int s = 0; s < kKeySlots; ++s) best = fmaxf(best, s_m[s][h]);
    float sum = 0.f, value = 0.f;
    for (int s = 0; s < kKeySlots; ++s) {
      const float w = best == -INFINITY ? 0.f : exp2f(s_m[s][h] - best);
      sum += s_l[s][h] * w;
      value += s_acc[s][h][dim] * w;
    }
    float* partial = args.workspace +
                     ((int64_t(b) * args.n_query_heads + head0 + h) * n_chunks + chunk) * (D + 2);
    if (dim == 0) {
      partial[0] = best;
      partial[1] = sum;
    }
    partial[2 + dim] = value;
  }
}

constexpr int kTileKeys = 64;

template <int D, int kStages>
__global__ void __launch_bounds__(kThreads)
    decode_mma_kernel(DecodeAttentionArgs args, int chunk_size, int n_chunks, bool early_tile) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [16][D]
  __nv_bfloat16* s_k = s_q + 16 * D;                                // [kStages][64][D]
  __nv_bfloat16* s_v = s_k + kStages * kTileKeys * D;               // [kStages][64][D]
  const int chunk = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int b = blockIdx.z;
  const int group = args.n_query_heads / args.n_kv_heads;
  const int head0 = kv_head * group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int begin = chunk * chunk_size;
  // The first tile's loads leave before the wait when its rows are settled. Offsets change only
  // when the cache is allocated, and within a decode step kernels only append: the length read here
  // is the step's old one or (if the append has landed) one more, so rows below it minus one are
  // final. Sending a 128-key split's second tile early as well measured slower (more copies in
  // flight beside the predecessor's weight stream; results/gpu-kernel-tuning.md §4.2).
  const int64_t kv_row0 = args.kv_offset[b * args.n_kv_heads + kv_head];
  // Gathered (shared group lists): the lists are the predecessor's output, so nothing leaves early.
  const bool gather = args.indices != nullptr;
  const bool tile0_early = early_tile && !gather &&
                           begin + kTileKeys <= args.kv_length[b * args.n_kv_heads + kv_head] - 1;
  if (tile0_early) {
    load_tile<D>(s_k, args.k + (kv_row0 + begin) * D, D, kTileKeys, kTileKeys);
    load_tile<D>(s_v, args.v + (kv_row0 + begin) * D, D, kTileKeys, kTileKeys);
    cp_async_commit();
  }
  const DecodeAppend& append = args.append;
  const bool appends = append.positions != nullptr;
  StepRope<D> rope;
  if (appends) rope.set_up(append);
  wait_for_predecessor();
  allow_successor_launch();

  // From L2: the read before the wait may have left a line in L1 that the predecessor has since
  // rewritten.
  const int stored = __ldcg(args.kv_length + b * args.n_kv_heads + kv_head);
  if (appends) {
    const __nv_bfloat16* row = args.q + b * args.q_seq_stride;
    rope.at_position(append.positions[b]);
    // The group's queries, biased and rotated into shared memory (rows past the group are zero);
    // first, so that their loads leave before anything waits on the length.
    rotate_queries<D, kThreads>(
        append, rope, row, head0, group, 16,
        [&](int r, int col, __nv_bfloat16 value) { s_q[swizzled<D>(r, col)] = value; });
    if (stored >= begin && stored < begin + chunk_size) {  // this block's chunk takes the new entry
      write_new_entry<D, kThreads>(append, rope, row, args.n_query_heads, args.n_kv_heads, kv_head,
                                   kv_row0 + stored);
      __syncthreads();  // the tile copies below read the new row
    }
  } else {
    load_tile<D>(s_q, args.q + b * args.q_seq_stride + int64_t(head0) * D, D, 16, group);
  }
  const int32_t* list =
      gather ? args.indices + args.index_offset[b * args.n_query_heads + head0] : nullptr;
  const int count =
      gather ? args.index_count[b * args.n_query_heads + head0] : stored + (appends ? 1 : 0);
  const int end = min(count, begin + chunk_size);
  const int n_tiles = end > begin ? (end - begin + kTileKeys - 1) / kTileKeys : 0;
  auto load_kv_tile = [&](int tile) {  // into its ring slot; one commit group per tile, even empty
    if (tile < n_tiles) {
      const int first = begin + tile * kTileKeys;
      const int slot = tile % kStages;
      const int valid = min(kTileKeys, end - first);
      if (gather) {
        load_gather_tile<D>(s_k + slot * kTileKeys * D, args.k + kv_row0 * D, list + first,
                            kTileKeys, valid);
        load_gather_tile<D>(s_v + slot * kTileKeys * D, args.v + kv_row0 * D, list + first,
                            kTileKeys, valid);
      } else {
        load_tile<D>(s_k + slot * kTileKeys * D, args.k + (kv_row0 + first) * D, D, kTileKeys,
                     valid);
        load_tile<D>(s_v + slot * kTileKeys * D, args.v + (kv_row0 + first) * D, D, kTileKeys,
                     valid);
      }
    }
    cp_async_commit();
  };
  if (!tile0_early)
    load_kv_tile(0);  // with the query's loads
  else
    cp_async_commit();
#pragma unroll
  for (int tile = 1; tile + 1 < kStages; ++tile) load_kv_tile(tile);

  constexpr int kSteps = D / 16, kDimTiles = D / 8;
  uint32_t q_frag[kSteps][4];
  float o[kDimTiles][4], row_max[2], row_sum[2];
  zero_tiles(o);
  start_rows(row_max, row_sum);
  const float scale_log2 = args.scale * 1.4426950408889634f;

  for (int tile = 0; tile < max(n_tiles, 1); ++tile) {
    const int buf = tile % kStages;
    load_kv_tile(tile + kStages - 1);  // into the slot the previous iteration finished with
    cp_async_wait<kStages - 1>();      // this tile's group (and the query's) has landed
    __syncthreads();
    if (tile == 0) load_query_fragments<D>(q_frag, s_q, 0, lane);
    if (n_tiles == 0) break;
    const __nv_bfloat16* k_tile = s_k + buf * kTileKeys * D;
    const __nv_bfloat16* v_tile = s_v + buf * kTileKeys * D;
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
      mma_query_keys16<D>(s[0], s[1], q_frag[ks], k_tile, warp * 16, ks);
    const int key0 = begin + tile * kTileKeys + warp * 16;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t + (e & 1);
        s[nt][e] = key < end ? s[nt][e] * scale_log2 : -INFINITY;
      }
    const SoftmaxTileStep step = online_softmax_tile<TileSum::kEach>(s, row_max, row_sum);
    rescale_rows(o, step.correction);
    uint32_t p_frag[4];
    probability_fragment(s, 0, p_frag);
    mma_probs_values16<D>(o, p_frag, v_tile, warp * 16);
    __syncthreads();
  }

  store_split_partials<D, kThreads>(
      o, row_max, row_sum, reinterpret_cast<float*>(s_k), group, [&](int row) {
        return args.workspace +
               ((int64_t(b) * args.n_query_heads + head0 + row) * n_chunks + chunk) * (D + 2);
      });
}

// kWriteLse: also the row log-sum-exp (decode-time eviction's statistic); a separate instantiation,
// so the plain decode step's merge keeps its registers (128; with the LSE code 142).
template <int D, bool kWriteLse>
__global__ void decode_merge_kernel(DecodeAttentionArgs args, int n_chunks, int chunk_size) {
  wait_for_predecessor();
  allow_successor_launch();
  const int head = blockIdx.x;
  const int b = blockIdx.y;
  const int group = args.n_query_heads / args.n_kv_heads;
  const float* partial =
      args.workspace + (int64_t(b) * args.n_query_heads + head) * n_chunks * (D + 2);
  __nv_bfloat16* out = args.out + b * args.out_seq_stride + head * D;
  float* lse = kWriteLse ? args.lse + int64_t(head) * args.batch + b : nullptr;
  if (args.append.positions != nullptr) {
    // Every chunk wrote a partial (empty ones: max -inf), so the merge needs no length, and the
    // group's first head's block can advance it with no other reader left in this step.
    merge_split_partials<D>(partial, n_chunks, n_chunks, out, lse);
    if (head % group == 0 && threadIdx.x == 0)
      args.append.kv_length[b * args.n_kv_heads + head / group] += 1;
    return;
  }
  int count = args.indices ? args.index_count[b * args.n_query_heads + head]
                           : args.kv_length[b * args.n_kv_heads + head / group];
  const int used = min(n_chunks, (count + chunk_size - 1) / chunk_size);
  merge_split_partials<D>(partial, n_chunks, used, out, lse);
}

// Chunks give every SM `resident` blocks (dense: as many as fit at once, so never a second wave —
// a few blocks more than the resident places double the time; results/gpu-kernel-tuning.md §4.3);
// index mode rounds up. The split is cut by the longest row: where the rows are ragged, a caller
// that knows their lengths passes the chunk dense_decode_chunk finds for them (the engine's decode
// step does).
int choose_chunk(const DecodeAttentionArgs& args, int blocks_per_chunk_row, int sm_count,
                 int granule, bool within_one_wave, int resident) {
  if (args.chunk_size > 0) return args.chunk_size;
  const int rows = std::max(1, blocks_per_chunk_row);
  const int splits = std::max(
      1, within_one_wave ? resident * sm_count / rows : (resident * sm_count + rows - 1) / rows);
  const int chunk = (args.max_kv_length + splits - 1) / splits;
  return std::max(granule, ((chunk + granule - 1) / granule) * granule);
}

// The dense kernel's K/V ring. One wave of blocks (batch 1-30 at long contexts: the split count
// fills the GPU once) takes 3 tiles (2 blocks per SM at head_dim 128); with 2, a block had one tile
// in flight while it computed the other (3 measured best of 2 / 3 / 4). Many waves of short heads
// (a compressed cache at a large batch) keep 2 (3 blocks per SM): each block's start and merge then
// hide behind two other blocks' streaming. Figures: results/gpu-kernel-tuning.md §4.4.
constexpr int kWaveStages = 3, kManyWavesStages = 2;
constexpr int kIndexedBlocksPerSm = 3;

template <int D>
size_t dense_shared_bytes(int stages) {
  return std::max<size_t>((16 + 2 * stages * kTileKeys) * D * sizeof(__nv_bfloat16),
                          (4 * 16 * D + 2 * 4 * 16) * sizeof(float));
}

// Thread blocks of the dense kernel resident per SM (sets the split count), from the occupancy
// calculator; also opts the kernel into its dynamic shared memory, once.
template <int D, int kStages>
int dense_blocks_per_sm() {
  static const int blocks = resident_blocks_per_sm(
      decode_mma_kernel<D, kStages>, kThreads, dense_shared_bytes<D>(kStages), "decode_mma_kernel");
  return blocks;
}

template <int D, int G>
void launch_indexed(const DecodeAttentionArgs& args, int chunk, int n_chunks, cudaStream_t stream) {
  dim3 grid(n_chunks, args.n_query_heads, args.batch);
  launch_overlapped(decode_partial_kernel<D, G>, grid, kThreads, 0, stream, "decode_partial_kernel",
                    args, chunk, n_chunks);
}

// Index lists walked per query head (the partial kernel); shared group lists without a logit bias
// go through the tensor-core kernel's gathered tiles instead.
bool per_head_lists(const DecodeAttentionArgs& args) {
  return args.indices != nullptr && (!args.shared_group_lists || args.logit_bias != nullptr);
}

// How one call cuts the keys: `chunk` keys per split, n_chunks splits.
struct DecodeLayout {
  bool many_waves = false;
  int chunk = 0;
  int n_chunks = 0;
};

template <int D>
DecodeLayout decode_layout(const DecodeAttentionArgs& args) {
  static thread_local int sm_count = device_info().sm_count;
  const bool indexed = per_head_lists(args);
  const int heads_axis = indexed ? args.n_query_heads : args.n_kv_heads;
  DecodeLayout layout;
  layout.many_waves =
      !indexed && heads_axis * args.batch > dense_blocks_per_sm<D, kWaveStages>() * sm_count;
  const int resident = indexed             ? kIndexedBlocksPerSm
                       : layout.many_waves ? dense_blocks_per_sm<D, kManyWavesStages>()
                                           : dense_blocks_per_sm<D, kWaveStages>();
  layout.chunk = choose_chunk(args, heads_axis * args.batch, sm_count, indexed ? 256 : kTileKeys,
                              !indexed, resident);
  layout.n_chunks = std::max(1, (args.max_kv_length + layout.chunk - 1) / layout.chunk);
  return layout;
}

// The blocks the dense kernel's one wave holds (the automatic split fills them), or 0 when the
// call takes many waves.
template <int D>
int64_t one_wave_places(const DecodeAttentionArgs& args) {
  if (decode_layout<D>(args).many_waves) return 0;
  return int64_t(dense_blocks_per_sm<D, kWaveStages>()) * device_info().sm_count;
}

template <int D>
void launch_decode(const DecodeAttentionArgs& args, cudaStream_t stream) {
  const bool indexed = per_head_lists(args);
  const int group = args.n_query_heads / args.n_kv_heads;
  if (!indexed && group > 16)
    throw std::invalid_argument("decode_attention: GQA group > 16 unsupported");
  check_decode_append(args, "decode_attention");
  const DecodeLayout layout = decode_layout<D>(args);
  const bool many_waves = layout.many_waves;
  const int chunk = layout.chunk, n_chunks = layout.n_chunks;
  if (indexed) {
    launch_indexed<D, 1>(args, chunk, n_chunks, stream);
  } else {
    const int stages = many_waves ? kManyWavesStages : kWaveStages;
    launch_overlapped(
        many_waves ? decode_mma_kernel<D, kManyWavesStages> : decode_mma_kernel<D, kWaveStages>,
        dim3(n_chunks, args.n_kv_heads, args.batch), kThreads, dense_shared_bytes<D>(stages),
        stream, "decode_mma_kernel", args, chunk, n_chunks, early_tile_enabled());
  }
  launch_overlapped(args.lse ? decode_merge_kernel<D, true> : decode_merge_kernel<D, false>,
                    dim3(args.n_query_heads, args.batch), D, 0, stream, "decode_merge_kernel", args,
                    n_chunks, chunk);
}

}  // namespace

size_t decode_attention_workspace_floats(int batch, int n_query_heads, int head_dim,
                                         int max_kv_length) {
  // Upper bound: chunks of at least 64 keys.
  const int max_chunks = std::max(1, (max_kv_length + 63) / 64);
  return size_t(batch) * n_query_heads * max_chunks * (head_dim + 2);
}

size_t decode_attention_layout_workspace_floats(const DecodeAttentionArgs& args) {
  const int n_chunks = with_constant<64, 128>(
      args.head_dim, "decode_attention: head_dim",
      [&](auto dim) { return decode_layout<decltype(dim)::value>(args).n_chunks; });
  return size_t(args.batch) * args.n_query_heads * n_chunks * (args.head_dim + 2);
}

void check_decode_append(const DecodeAttentionArgs& args, const char* kernel) {
  const DecodeAppend& append = args.append;
  if (append.positions != nullptr &&
      (args.indices != nullptr || !append.inv_freq || !append.k_cache || !append.v_cache ||
       append.kv_length != args.kv_length))
    throw std::invalid_argument(std::string(kernel) +
                                ": the step's append runs in dense mode only and needs inv_freq, "
                                "the writable cache buffers and the same kv_length");
}

int dense_decode_chunk(const DecodeAttentionArgs& args, const int32_t* lengths, int rows) {
  if (args.indices != nullptr || rows <= 0) return 0;
  const int64_t places =
      with_constant<64, 128>(args.head_dim, "dense_decode_chunk: head_dim",
                             [&](auto dim) { return one_wave_places<decltype(dim)::value>(args); });
  if (places == 0) return 0;
  auto busy_blocks = [&](int chunk) {
    int64_t blocks = 0;
    for (int r = 0; r < rows; ++r) blocks += (std::max(lengths[r], 1) + chunk - 1) / chunk;
    return blocks;
  };
  // Σ ceil(length / chunk) falls as the chunk grows: the smallest tile count that fits.
  const int longest = std::max(1, *std::max_element(lengths, lengths + rows));
  int low = 1, high = (longest + kTileKeys - 1) / kTileKeys;  // in tiles: one chunk a row
  if (busy_blocks(high * kTileKeys) > places) return 0;
  while (low < high) {
    const int mid = (low + high) / 2;
    if (busy_blocks(mid * kTileKeys) <= places)
      high = mid;
    else
      low = mid + 1;
  }
  return high * kTileKeys;
}

void decode_attention(const DecodeAttentionArgs& args, cudaStream_t stream) {
  if (args.batch <= 0) return;
  with_constant<64, 128>(args.head_dim, "decode_attention: head_dim",
                         [&](auto dim) { launch_decode<decltype(dim)::value>(args, stream); });
}

}  // namespace kvb::cuda
