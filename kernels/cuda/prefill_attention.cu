// Causal flash attention for prefill (FlashAttention-2 scheme) with GQA and row log-sum-exp.
// CPU twin: kernels/cpu/attention.h (prefill_attention). Test: tests/cuda/attention_test.cc.
//
// Block = 4 warps = 64 query rows of one query head; KV tiles of 64 keys, double-buffered with
// cp.async; S = QK^T and O += PV on bf16 mma.sync m16n8k16 tensor-core instructions; the online
// softmax runs in the log2 domain in f32; shared memory rows are XOR-swizzled in 16-byte chunks so
// ldmatrix reads are conflict-free. Query tiles are scheduled longest-first (causal imbalance).
// The other paths: the Hopper wgmma kernel (prefill_attention_sm90a.cu) and, for a few queries
// after a long prefix, the split-KV kernel (prefill_split_kv.cu), which reads each KV head's keys
// and values once for all its (query, query head) rows across every SM where this kernel would
// give each query head one block streaming every key.
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/launch.cuh"
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
  float o_acc[kDimTiles][4], row_max[2], row_sum[2];
  zero_tiles(o_acc);
  start_rows(row_max, row_sum);
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
    if (tile == 0) load_query_fragments<D>(q_frag, s_q, warp * 16, lane);
    const __nv_bfloat16* k_tile = s_k + buf * kKeysPerTile * D;
    const __nv_bfloat16* v_tile = s_v + buf * kKeysPerTile * D;

    float s[kKeyTiles][4];
    zero_tiles(s);
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
  allow_dynamic_shared_memory(flash_prefill_kernel<D>, smem, "flash_prefill_kernel");
  dim3 grid((args.n_queries + kRowsPerBlock - 1) / kRowsPerBlock, args.n_query_heads);
  flash_prefill_kernel<D><<<grid, kThreads, smem, stream>>>(args);
  check(cudaGetLastError(), "flash_prefill_kernel launch");
}

// The kernels move rows in 16-byte pieces (cp.async, TMA): a row or head that starts off a 16-byte
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

// Few queries after a long prefix (DropKV's window forward: 8 queries after 128K keys) run split-KV
// where a workspace is given: this kernel would give each query head one block streaming every key.
constexpr int kSplitKvMinPrefix = 1024;

}  // namespace

// prefill_split_kv.cu.
bool split_kv_applies(const PrefillAttentionArgs& args);
void prefill_attention_split_kv(const PrefillAttentionArgs& args, cudaStream_t stream);

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
    prefill_attention_split_kv(args, stream);
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
  with_constant<64, 128>(args.head_dim, "prefill_attention: head_dim",
                         [&](auto dim) { launch_prefill<decltype(dim)::value>(args, stream); });
}

}  // namespace kvb::cuda
