// Causal flash attention for prefill on Hopper (sm_90a): the FlashAttention-2 scheme of
// prefill_attention.cu on warpgroup tensor-core instructions (wgmma), which the sm_90
// mma.sync path cannot reach (its peak is well below the device's bf16 rate:
// results/gpu-kernel-tuning.md §8). Same contract: GQA, causal with a prefix offset, row
// log-sum-exp. Built only for sm_90a (kernels/CMakeLists.txt) and launched only on compute
// capability 9.0; other GPUs and head_dim 64 use the mma.sync kernel.
// Test: tests/cuda/attention_test.cc (both kernels against the CPU reference).
//
// Block = kGroups consumer warpgroups (64 query rows each, of one query head) + 1 producer
// warpgroup. One producer thread streams 128-key K and V tiles with the Tensor Memory Accelerator
// (TMA) into a ring of stages guarded by mbarriers (full: the tile's bytes landed; empty: every
// consumer warp is done with it), so consumers never wait on each other: while one runs its
// softmax, another's products keep the tensor cores busy. Every tile sits in shared memory as two
// 64-column halves of 128-byte rows in the 128-byte-swizzled layout wgmma descriptors describe
// (16-byte chunk c of row r stored at chunk c ^ (r % 8)), which is the layout TMA's 128-byte
// swizzle writes; rows past the last key or query arrive zero-filled (zero V rows keep 0 * garbage
// out of the sums). TMA replaced a 128-thread cp.async producer: its copies wrote through the
// generic proxy, so each consumer fenced (MEMBAR) before every product, and the 4,096 16-byte
// copies per tile went through L1 (TMA measured much faster: results/gpu-kernel-tuning.md §8.1).
// S = Q K^T
// reads Q and K from shared memory (both K-major); P stays in registers, where the S accumulator
// layout is already the A fragment layout, and O += P V reads V as an MN-major (transposed) B
// operand. The online softmax runs in the log2 domain with the scale folded into one FMA. Blocks of
// the same query tile run head-fastest, so the query heads of a KV head stream the same K/V tiles
// through L2 together; more rows per block (kGroups = 3) means fewer K/V bytes from L2 per FLOP.
#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder comes from the runtime)
#include <cuda_bf16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_tiles.cuh"

namespace kvb::cuda {
namespace {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVB_WGMMA_DEVICE 1
#endif

constexpr int kHeadDim = 128;
constexpr int kKeys = 128;                      // keys per KV tile
constexpr int kProducerThreads = 128;           // one warpgroup; one of its threads issues TMA
constexpr uint32_t kKvHalfBytes = kKeys * 128;  // one 64-column half of a K or V tile
constexpr uint32_t kKvTileBytes = 2 * kKvHalfBytes;

// 3 consumer warpgroups measured faster than 2 (with 3 K/V stages, or with FlashAttention-3's turns
// and intra-warpgroup overlap; results/gpu-kernel-tuning.md §8.2).
constexpr int kGroups = 3;
constexpr int kRows = 64 * kGroups;  // query rows per block
constexpr int kConsumerThreads = 128 * kGroups;
constexpr int kThreads = kConsumerThreads + kProducerThreads;
// What fits in 227 KB with a 192-row Q. Tried with TMA and dropped: 3 K stages + 2 V stages, K
// freed after S = Q K^T (its own empty barrier): measured slower (results/gpu-kernel-tuning.md
// §8.3).
constexpr int kStages = 2;
constexpr uint32_t kQHalfBytes = kRows * 128;
constexpr int kSmemBytes = 2 * kQHalfBytes + 2 * kStages * kKvTileBytes + 1024;
// Registers per thread after setmaxnreg (entry: 65536 / 512 = 128): the producer gives most of
// its share to the consumers (3 * 160 + 32 = 4 * 128).
constexpr int kProducerRegisters = 32;
constexpr int kConsumerRegisters = 160;

// wgmma shared-memory descriptor: start address, leading and stride byte offsets (all >> 4) and
// the 128-byte swizzle mode (1 in bits 62-63). K-major operands use only the stride offset (8
// rows = 1024 B); the MN-major V operand also steps between its 64-column halves by the leading
// one.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t address, uint32_t leading_bytes,
                                                    uint32_t stride_bytes) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t(leading_bytes >> 4) << 16) |
         (uint64_t(stride_bytes >> 4) << 32) | (uint64_t(1) << 62);
}

// mbarriers (shared::cta).
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// The producer's arrival: the phase completes once `bytes` more have landed through TMA.
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, "
        "0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}
// One TMA box of `map` at coordinates (c0, c1, c2) into shared memory at `dst`; its bytes count
// towards `bar`'s transaction.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap& map, int c0, int c1,
                                         int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of accumulators across the asynchronous wgmma.
__device__ __forceinline__ void fence_registers(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The 64 f32 accumulators of an m64n128 wgmma as read-write asm operands %0..%63 (both wgmma
// forms).
#define KVB_WGMMA_ACCUMULATORS(d)                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// One m64n128k16 wgmma with both operands in shared memory (K-major A and B): d (+)= A B.
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                         int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : KVB_WGMMA_ACCUMULATORS(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// One m64n128k16 wgmma with A from registers (the accumulator layout: P, or Q fragments) and B in
// shared memory, K-major (kTransposeB = 0: K rows) or MN-major (1: V rows, the N index, the head
// dimension, contiguous): d (+)= A B.
template <int kTransposeB>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                         int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : KVB_WGMMA_ACCUMULATORS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransposeB));
}

#undef KVB_WGMMA_ACCUMULATORS

// S = Q K^T for one warpgroup's 64 rows: 8 k-steps of 16 over the head dimension (4 per 64-column
// half, 32 B apart within the swizzled rows).
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t q_rows, uint32_t q_half_bytes,
                                         uint32_t k_tile) {
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    const uint32_t within = (ks & 3) * 32;
    wgmma_ss(s, smem_descriptor(q_rows + (ks >> 2) * q_half_bytes + within, 16, 1024),
             smem_descriptor(k_tile + (ks >> 2) * kKvHalfBytes + within, 16, 1024), ks > 0);
  }
}

// O += P V: 8 k-steps of 16 keys (16 rows of 128 B apart); N spans both 64-column halves.
__device__ __forceinline__ void issue_pv(float (&o)[64], const uint32_t (&p)[8][4],
                                         uint32_t v_tile) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
    wgmma_rs<1>(o, p[kk], smem_descriptor(v_tile + kk * 16 * 128, kKvHalfBytes, 1024), 1);
}

// 2^x on the MUFU unit, flushing denormal results to zero (exp2f's denormal handling costs three
// more instructions per probability).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The online softmax of one thread's two rows (accumulator layout: s[4i + 2r + e] is row r's
// key key0 + 8i + 2t + e), in the log2 domain with the scale folded into one FMA.
struct OnlineSoftmax {
  float scale_log2 = 0;
  int n_keys = 0;
  int t = 0;
  int q_pos[2] = {0, 0};
  float row_max[2] = {-INFINITY, -INFINITY};  // scaled, log2 domain
  float row_sum[2] = {0.f, 0.f};              // this thread's columns only until the end

  // Turns the logits of the tile at key0 into bf16 probabilities p (the A fragments of P V) and
  // rescales o and the sums to the new row maxima. `masked`: the tile reaches past some row's
  // position (only then, or past the last key, are keys compared).
  __device__ __forceinline__ void step(float (&s)[64], float (&o)[64], uint32_t (&p)[8][4],
                                       int key0, bool masked) {
    if (masked || key0 + kKeys > n_keys) {
#pragma unroll
      for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * i + 2 * t + (e & 1);
          if (key > q_pos[e >> 1] || key >= n_keys) s[4 * i + e] = -INFINITY;
        }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[4 * i], s[4 * i + 1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
    float correction[2], shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = quad_max(tile_max[r]);
      const float new_max = fmaxf(row_max[r], tile_max[r] * scale_log2);
      correction[r] = new_max == -INFINITY ? 1.f : fast_exp2(row_max[r] - new_max);
      row_max[r] = new_max;
      shift[r] = new_max == -INFINITY ? 0.f : new_max;
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float e[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        e[k] = fast_exp2(fmaf(s[4 * i + k], scale_log2, -shift[k >> 1]));
        row_sum[k >> 1] += e[k];
      }
      p[i / 2][(i & 1) * 2] = pack_bf16(e[0], e[1]);
      p[i / 2][(i & 1) * 2 + 1] = pack_bf16(e[2], e[3]);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      o[4 * i] *= correction[0];
      o[4 * i + 1] *= correction[0];
      o[4 * i + 2] *= correction[1];
      o[4 * i + 3] *= correction[1];
    }
  }
};

// Where TMA reads Q, K and V (make_prefill_maps).
struct PrefillMaps {
  CUtensorMap q;  // (column, query head, query row); box 64 x 1 x kRows
  CUtensorMap k;  // (column, key, KV head); box 64 x kKeys x 1
  CUtensorMap v;
};

__global__ void __launch_bounds__(kThreads, 1)
    flash_prefill_wgmma_kernel(const PrefillAttentionArgs args,
                               const __grid_constant__ PrefillMaps maps) {
#ifdef KVB_WGMMA_DEVICE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t barriers[1 + 3 * kStages];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t s_q = (raw + 1023) & ~1023u;  // the swizzle pattern repeats every 1024 B
  const uint32_t s_k = s_q + 2 * kQHalfBytes;  // kStages tiles
  const uint32_t s_v = s_k + kStages * kKvTileBytes;
  const uint32_t bar_q = static_cast<uint32_t>(__cvta_generic_to_shared(barriers));
  auto bar_k = [&](int stage) { return bar_q + 8 * (1 + stage); };
  auto bar_v = [&](int stage) { return bar_q + 8 * (1 + kStages + stage); };
  auto bar_empty = [&](int stage) { return bar_q + 8 * (1 + 2 * kStages + stage); };

  const int q_head = blockIdx.x;
  const int q_tile = gridDim.y - 1 - blockIdx.y;  // longest rows first (causal imbalance)
  const int kv_head = q_head / (args.n_query_heads / args.n_kv_heads);
  const int row0 = q_tile * kRows;
  const int rows_valid = min(kRows, args.n_queries - row0);
  const int n_keys = args.query_offset + args.n_queries;
  const int first_pos = args.query_offset + row0;
  const int n_tiles = (first_pos + rows_valid - 1) / kKeys + 1;

  if (threadIdx.x == 0) {
    mbarrier_init(bar_q, 1);  // the producer thread's arrival, plus the bytes it expects
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrier_init(bar_k(stage), 1);
      mbarrier_init(bar_v(stage), 1);
      mbarrier_init(bar_empty(stage), 4 * kGroups);  // lane 0 of each consumer warp
    }
    // The barriers are also used by TMA (the async proxy).
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Warp-uniform as far as the compiler can tell (a plain threadIdx.x / 128 makes ptxas treat the
  // wgmma code as divergent and serialize it).
  const int group = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  if (group == kGroups) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters) : "memory");
    if (threadIdx.x != kConsumerThreads) return;
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&maps.k))
                 : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&maps.v))
                 : "memory");
    mbarrier_expect_bytes(bar_q, 2 * kQHalfBytes);
    for (int half = 0; half < 2; ++half)
      tma_load(s_q + half * kQHalfBytes, maps.q, half * 64, q_head, row0, bar_q);
    for (int tile = 0; tile < n_tiles; ++tile) {
      const int stage = tile % kStages;
      if (tile >= kStages) mbarrier_wait(bar_empty(stage), (tile / kStages - 1) & 1);
      mbarrier_expect_bytes(bar_k(stage), kKvTileBytes);
      for (int half = 0; half < 2; ++half)
        tma_load(s_k + stage * kKvTileBytes + half * kKvHalfBytes, maps.k, half * 64, tile * kKeys,
                 kv_head, bar_k(stage));
      mbarrier_expect_bytes(bar_v(stage), kKvTileBytes);
      for (int half = 0; half < 2; ++half)
        tma_load(s_v + stage * kKvTileBytes + half * kKvHalfBytes, maps.v, half * 64, tile * kKeys,
                 kv_head, bar_v(stage));
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters) : "memory");

  const int warp = (threadIdx.x % 128) / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  float o[64], s[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = s[i] = 0.f;
  OnlineSoftmax softmax;
  softmax.scale_log2 = args.scale * 1.4426950408889634f;
  softmax.n_keys = n_keys;
  softmax.t = t;
  const int my_row = group * 64 + warp * 16 + g;  // and my_row + 8
  softmax.q_pos[0] = first_pos + my_row;
  softmax.q_pos[1] = first_pos + my_row + 8;
  const uint32_t q_rows = s_q + group * 64 * 128;
  mbarrier_wait(bar_q, 0);

  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % kStages;
    const uint32_t parity = (j / kStages) & 1;
    mbarrier_wait(bar_k(stage), parity);
    wgmma_fence();
    issue_qk(s, q_rows, kQHalfBytes, s_k + stage * kKvTileBytes);
    wgmma_commit();
    wgmma_wait_all();
    fence_registers(s);

    uint32_t p[8][4];
    softmax.step(s, o, p, j * kKeys, j * kKeys + kKeys - 1 > first_pos);

    mbarrier_wait(bar_v(stage), parity);
    fence_registers(o);
    wgmma_fence();
    issue_pv(o, p, s_v + stage * kKvTileBytes);
    wgmma_commit();
    wgmma_wait_all();
    fence_registers(o);
    if (lane == 0) mbarrier_arrive(bar_empty(stage));
  }

  float row_sum[2] = {softmax.row_sum[0], softmax.row_sum[1]};
#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = quad_sum(row_sum[r]);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + my_row + 8 * r;
    if (row >= args.n_queries) continue;
    const float inv = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
    __nv_bfloat16* out_row = args.out + row * args.out_row_stride + q_head * kHeadDim;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      *reinterpret_cast<uint32_t*>(out_row + 8 * i + 2 * t) =
          pack_bf16(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
    if (args.lse && t == 0)
      args.lse[int64_t(q_head) * args.n_queries + row] =
          softmax.row_max[r] * 0.6931471805599453f + logf(row_sum[r]);
  }
#endif
}

}  // namespace

bool wgmma_prefill_supported(int head_dim) {
  if (head_dim != kHeadDim) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;  // sm_90a code runs on exactly 9.0
}

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, through the runtime (no link against libcuda).
EncodeTiled find_tensor_map_encoder() {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &found),
        "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
  if (found != cudaDriverEntryPointSuccess || function == nullptr)
    throw std::runtime_error(
        "prefill_attention: the CUDA driver has no cuTensorMapEncodeTiled "
        "(needs a CUDA 12 or newer driver)");
  return reinterpret_cast<EncodeTiled>(function);
}

// A bf16 tensor of dims (128 columns, dim1, dim2) with byte strides stride1, stride2, read in
// 128-byte-swizzled boxes of 64 columns x box1 x box2; what lies outside the dims reads as zero.
CUtensorMap encode_map(EncodeTiled encode, const __nv_bfloat16* base, uint64_t dim1, uint64_t dim2,
                       int64_t stride1, int64_t stride2, uint32_t box1, uint32_t box2,
                       const char* what) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(kHeadDim), dim1, dim2};
  const cuuint64_t strides[2] = {cuuint64_t(stride1) * sizeof(__nv_bfloat16),
                                 cuuint64_t(stride2) * sizeof(__nv_bfloat16)};
  const cuuint32_t box[3] = {64, box1, box2};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult status = encode(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<__nv_bfloat16*>(base), dims, strides,
      box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw std::runtime_error(std::string("prefill_attention: cuTensorMapEncodeTiled failed for ") +
                             what + " (CUresult " + std::to_string(int(status)) + ")");
  return map;
}

PrefillMaps make_prefill_maps(const PrefillAttentionArgs& args) {
  static const EncodeTiled encode = find_tensor_map_encoder();  // one driver look-up per process
  const uint64_t n_keys = uint64_t(args.query_offset) + args.n_queries;
  PrefillMaps maps;
  // Query heads are 128 columns apart within a row; the rows are the outer dimension.
  maps.q = encode_map(encode, args.q, args.n_query_heads, args.n_queries, kHeadDim,
                      args.q_row_stride, 1, kRows, "the queries");
  maps.k = encode_map(encode, args.k, n_keys, args.n_kv_heads, kHeadDim, args.kv_head_stride, kKeys,
                      1, "the keys");
  maps.v = encode_map(encode, args.v, n_keys, args.n_kv_heads, kHeadDim, args.kv_head_stride, kKeys,
                      1, "the values");
  return maps;
}

}  // namespace

void prefill_attention_wgmma(const PrefillAttentionArgs& args, cudaStream_t stream) {
  if (args.n_queries <= 0) return;
  allow_dynamic_shared_memory(flash_prefill_wgmma_kernel, kSmemBytes, "flash_prefill_wgmma_kernel");
  const dim3 grid(args.n_query_heads, (args.n_queries + kRows - 1) / kRows);
  flash_prefill_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(args, make_prefill_maps(args));
  check(cudaGetLastError(), "flash_prefill_wgmma_kernel launch");
}

}  // namespace kvb::cuda
