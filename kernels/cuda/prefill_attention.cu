// Causal flash attention for prefill (FlashAttention-2 scheme) with GQA and row log-sum-exp.
// CPU twin: kernels/cpu/attention.h (prefill_attention). Test: tests/cuda/attention_test.cc.
//
// Block = 4 warps = 64 query rows of one query head; KV tiles of 64 keys, double-buffered with
// cp.async; S = QK^T and O += PV on bf16 mma.sync m16n8k16 tensor-core instructions; the online
// softmax runs in the log2 domain in f32; shared memory rows are XOR-swizzled in 16-byte chunks so
// ldmatrix reads are conflict-free. Query tiles are scheduled longest-first (causal imbalance).
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/mma_tiles.cuh"
#include "kernels/cuda/online_softmax.cuh"

namespace kvb::cuda {
namespace {

constexpr int kRowsPerBlock = 64;
constexpr int kKeysPerTile = 64;
constexpr int kThreads = 128;

template <int D>
__global__ void __launch_bounds__(kThreads) flash_prefill_kernel(PrefillAttentionArgs args) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* s_k = s_q + kRowsPerBlock * D;     // 2 buffers
  __nv_bfloat16* s_v = s_k + 2 * kKeysPerTile * D;  // 2 buffers

  const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest rows first
  const int q_head = blockIdx.y;
  const int kv_head = q_head / (args.n_query_heads / args.n_kv_heads);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const int row0 = q_tile * kRowsPerBlock;
  const int rows_valid = min(kRowsPerBlock, args.n_queries - row0);
  const int n_keys = args.query_offset + args.n_queries;
  const int last_key = args.query_offset + row0 + rows_valid - 1;
  const int n_tiles = last_key / kKeysPerTile + 1;

  const __nv_bfloat16* q_base = args.q + row0 * args.q_row_stride + q_head * D;
  const __nv_bfloat16* k_base = args.k + kv_head * args.kv_head_stride;
  const __nv_bfloat16* v_base = args.v + kv_head * args.kv_head_stride;

  load_tile<D>(s_q, q_base, args.q_row_stride, kRowsPerBlock, rows_valid);
  load_tile<D>(s_k, k_base, D, kKeysPerTile, min(kKeysPerTile, n_keys));
  load_tile<D>(s_v, v_base, D, kKeysPerTile, min(kKeysPerTile, n_keys));
  cp_async_commit();

  constexpr int kSteps = D / 16;    // k-steps over the head dimension
  constexpr int kDimTiles = D / 8;  // n-tiles of the output
  constexpr int kKeyTiles = kKeysPerTile / 8;
  uint32_t q_frag[kSteps][4];
  float o_acc[kDimTiles][4];
#pragma unroll
  for (int i = 0; i < kDimTiles; ++i) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};
  const float scale_log2 = args.scale * 1.4426950408889634f;
  const int q_pos[2] = {args.query_offset + row0 + warp * 16 + g,
                        args.query_offset + row0 + warp * 16 + g + 8};

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int buf = tile & 1;
    if (tile + 1 < n_tiles) {
      const int next_key = (tile + 1) * kKeysPerTile;
      const int valid = min(kKeysPerTile, n_keys - next_key);
      load_tile<D>(s_k + (buf ^ 1) * kKeysPerTile * D, k_base + int64_t(next_key) * D, D,
                   kKeysPerTile, valid);
      load_tile<D>(s_v + (buf ^ 1) * kKeysPerTile * D, v_base + int64_t(next_key) * D, D,
                   kKeysPerTile, valid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks)
        ldmatrix_x4(q_frag[ks],
                    s_q + swizzled<D>(warp * 16 + (lane % 16), ks * 16 + (lane / 16) * 8));
    }
    const __nv_bfloat16* k_tile = s_k + buf * kKeysPerTile * D;
    const __nv_bfloat16* v_tile = s_v + buf * kKeysPerTile * D;

    float s[kKeyTiles][4];
#pragma unroll
    for (int i = 0; i < kKeyTiles; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kKeyTiles / 2; ++np)
        mma_query_keys16<D>(s[2 * np], s[2 * np + 1], q_frag[ks], k_tile, np * 16, ks);
    }

    // Scale, mask, online softmax (rows g and g+8 of this warp's 16).
    const int key0 = tile * kKeysPerTile;
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t + (e & 1);
        const int r = e >> 1;
        float value = s[nt][e] * scale_log2;
        if (key > q_pos[r] || key >= n_keys) value = -INFINITY;
        s[nt][e] = value;
      }
    }
    const SoftmaxTileStep step = online_softmax_tile<TileSum::kEach>(s, row_max, row_sum);
    rescale_rows(o_acc, step.correction);
    // O += P V, P taken straight from the S accumulators as the A operand.
#pragma unroll
    for (int kk = 0; kk < kKeysPerTile / 16; ++kk) {
      uint32_t p_frag[4];
      probability_fragment(s, kk, p_frag);
      mma_probs_values16<D>(o_acc, p_frag, v_tile, kk * 16);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = quad_sum(row_sum[r]);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + warp * 16 + g + 8 * r;
    if (row >= args.n_queries) continue;
    const float inv = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
    __nv_bfloat16* out_row = args.out + row * args.out_row_stride + q_head * D;
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      *reinterpret_cast<uint32_t*>(out_row + dt * 8 + 2 * t) =
          pack_bf16(o_acc[dt][2 * r] * inv, o_acc[dt][2 * r + 1] * inv);
    }
    if (args.lse && t == 0)
      args.lse[int64_t(q_head) * args.n_queries + row] =
          row_max[r] * 0.6931471805599453f + logf(row_sum[r]);
  }
}

template <int D>
void launch_prefill(const PrefillAttentionArgs& args, cudaStream_t stream) {
  const size_t smem = (kRowsPerBlock + 4 * kKeysPerTile) * D * sizeof(__nv_bfloat16);
  check(cudaFuncSetAttribute(flash_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)),
        "cudaFuncSetAttribute(flash_prefill_kernel)");
  dim3 grid((args.n_queries + kRowsPerBlock - 1) / kRowsPerBlock, args.n_query_heads);
  flash_prefill_kernel<D><<<grid, kThreads, smem, stream>>>(args);
  check(cudaGetLastError(), "flash_prefill_kernel launch");
}

// Both kernels move rows in 16-byte pieces (cp.async, TMA): a row or head that starts off a 16-byte
// boundary would stop the GPU with a misaligned-address fault, which poisons the whole context.
void check_rows_aligned(const PrefillAttentionArgs& args) {
  auto aligned = [](const void* base, int64_t stride) {
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 &&
           (stride * int64_t(sizeof(__nv_bfloat16))) % 16 == 0;
  };
  if (!aligned(args.q, args.q_row_stride) || !aligned(args.k, args.kv_head_stride) ||
      !aligned(args.v, args.kv_head_stride))
    throw std::invalid_argument(
        "prefill_attention: q, k and v must be 16-byte aligned and q_row_stride / "
        "kv_head_stride "
        "multiples of 8 elements (got q_row_stride " +
        std::to_string(args.q_row_stride) + ", kv_head_stride " +
        std::to_string(args.kv_head_stride) + ")");
}

// The split-KV path: query row i is a decode query whose cache is its KV head's first
// query_offset + i + 1 rows (exactly the causal mask), so a few queries after a long prefix spread
// over every SM as decode_attention's splits instead of one block per query head streaming every
// key (DropKV's window forward: 8 queries after 128K keys).
constexpr int kSplitKvMaxQueries = 16;
constexpr int kSplitKvMinPrefix = 1024;

struct SplitKvWorkspace {
  int64_t* kv_offset;  // [n_queries * Hkv]
  int32_t* kv_length;
  float* partials;
};

size_t split_kv_table_bytes(const PrefillAttentionArgs& args) {
  const size_t entries = size_t(args.n_queries) * args.n_kv_heads;
  return (entries * (sizeof(int64_t) + sizeof(int32_t)) + 255) / 256 * 256;
}

SplitKvWorkspace split_kv_workspace(const PrefillAttentionArgs& args) {
  const size_t entries = size_t(args.n_queries) * args.n_kv_heads;
  auto* base = static_cast<unsigned char*>(args.workspace);
  return {reinterpret_cast<int64_t*>(base),
          reinterpret_cast<int32_t*>(base + entries * sizeof(int64_t)),
          reinterpret_cast<float*>(base + split_kv_table_bytes(args))};
}

bool split_kv_applies(const PrefillAttentionArgs& args) {
  return args.n_queries <= kSplitKvMaxQueries && args.kv_head_stride % args.head_dim == 0 &&
         args.n_query_heads / args.n_kv_heads <= 16;
}

// The decode call of the split-KV path, less its tables and workspace.
DecodeAttentionArgs split_kv_decode_args(const PrefillAttentionArgs& args) {
  DecodeAttentionArgs d;
  d.q = args.q;
  d.q_seq_stride = args.q_row_stride;
  d.k = args.k;
  d.v = args.v;
  d.max_kv_length = args.query_offset + args.n_queries;
  d.out = args.out;
  d.out_seq_stride = args.out_row_stride;
  d.batch = args.n_queries;
  d.n_query_heads = args.n_query_heads;
  d.n_kv_heads = args.n_kv_heads;
  d.head_dim = args.head_dim;
  d.scale = args.scale;
  d.lse = args.lse;
  return d;
}

void prefill_split_kv(const PrefillAttentionArgs& args, cudaStream_t stream) {
  if (args.workspace == nullptr || !split_kv_applies(args))
    throw std::invalid_argument(
        "prefill_attention: the split-KV path needs a workspace "
        "(prefill_split_kv_workspace_bytes), at most " +
        std::to_string(kSplitKvMaxQueries) +
        " queries, a GQA group of at most 16 and kv_head_stride a multiple of head_dim");
  const SplitKvWorkspace w = split_kv_workspace(args);
  const int entries = args.n_queries * args.n_kv_heads;
  std::vector<int64_t> offsets(entries);
  std::vector<int32_t> lengths(entries);
  for (int i = 0; i < args.n_queries; ++i)
    for (int h = 0; h < args.n_kv_heads; ++h) {
      offsets[i * args.n_kv_heads + h] = h * (args.kv_head_stride / args.head_dim);
      lengths[i * args.n_kv_heads + h] = args.query_offset + i + 1;
    }
  // From pageable memory: the copy is staged before the call returns, and the decode kernels after
  // it start only once it landed (no programmatic overlap across a copy).
  check(cudaMemcpyAsync(w.kv_offset, offsets.data(), entries * sizeof(int64_t),
                        cudaMemcpyHostToDevice, stream),
        "split-KV offsets upload");
  check(cudaMemcpyAsync(w.kv_length, lengths.data(), entries * sizeof(int32_t),
                        cudaMemcpyHostToDevice, stream),
        "split-KV lengths upload");
  DecodeAttentionArgs d = split_kv_decode_args(args);
  d.kv_offset = w.kv_offset;
  d.kv_length = w.kv_length;
  d.workspace = w.partials;
  decode_attention(d, stream);
}

}  // namespace

size_t prefill_split_kv_workspace_bytes(const PrefillAttentionArgs& args) {
  return split_kv_table_bytes(args) +
         decode_attention_layout_workspace_floats(split_kv_decode_args(args)) * sizeof(float);
}

#if KVB_HAVE_WGMMA_PREFILL
// prefill_attention_sm90a.cu (compiled for sm_90a only).
bool wgmma_prefill_supported(int head_dim);
void prefill_attention_wgmma(const PrefillAttentionArgs& args, cudaStream_t stream);
bool wgmma_prefill_available(int head_dim) { return wgmma_prefill_supported(head_dim); }
#else
bool wgmma_prefill_available(int) { return false; }
#endif

void prefill_attention(const PrefillAttentionArgs& args, cudaStream_t stream) {
  if (args.n_queries <= 0) return;
  check_rows_aligned(args);
  if (args.kernel == PrefillKernel::kSplitKv ||
      (args.kernel == PrefillKernel::kAuto && args.workspace != nullptr &&
       args.query_offset >= kSplitKvMinPrefix && split_kv_applies(args))) {
    prefill_split_kv(args, stream);
    return;
  }
  if (args.kernel != PrefillKernel::kMmaSync && wgmma_prefill_available(args.head_dim)) {
#if KVB_HAVE_WGMMA_PREFILL
    prefill_attention_wgmma(args, stream);
    return;
#endif
  }
  if (args.kernel == PrefillKernel::kWgmma)
    throw std::invalid_argument(
        "prefill_attention: the wgmma kernel needs an sm_90 GPU, "
        "head_dim 128 and a build with sm_90a support");
  switch (args.head_dim) {
    case 64:
      launch_prefill<64>(args, stream);
      break;
    case 128:
      launch_prefill<128>(args, stream);
      break;
    default:
      throw std::invalid_argument("prefill_attention: head_dim " + std::to_string(args.head_dim) +
                                  " unsupported (64 or 128)");
  }
}

}  // namespace kvb::cuda
