// Device helpers shared by the tensor-core attention kernels: swizzled shared-memory tiles,
// cp.async loads, ldmatrix, the bf16 m16n8k16 and int8 m16n8k32 mma. Fragment layouts (PTX ISA,
// mma.m16n8k16): lane = 4*g + t; A holds rows g and g+8, columns 2t,2t+1 (+8); B holds rows 2t,2t+1
// (+8) of column g; C holds rows g and g+8, columns 2t, 2t+1.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kvb::cuda {

// The sum / max of `value` over a quad (lanes 4g .. 4g + 3, which hold one row of an mma
// accumulator tile between them).
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffff, value, 1);
  value += __shfl_xor_sync(0xffffffff, value, 2);
  return value;
}

__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, 1));
  value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, 2));
  return value;
}

template <int D>
__device__ __forceinline__ int swizzled(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// All 16 bytes, or (valid = false) none read and 16 zeroed. (A partial source size is not offered:
// compute-sanitizer counts the whole 16 bytes as read, so a copy ending at an array's last 8 bytes
// uses cp_async_small<8>, as binary_hash.cu's odd-length slots do.)
__device__ __forceinline__ void cp_async_16(void* smem, const void* global, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(bytes));
}
// A 4- or 8-byte copy into shared memory through L1 (cp.async.ca; 16 bytes: cp_async_16).
template <int kBytes>
__device__ __forceinline__ void cp_async_small(void* smem, const void* global, bool valid = true) {
  static_assert(kBytes == 4 || kBytes == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? kBytes : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(global),
               "n"(kBytes), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a(16x16, row) * b(16x8, col), bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a(16x32, row) * b(32x8, col), int8 inputs (4 per register), int32 accumulators. Layout as
// above with 4 bytes per register: A holds rows g and g+8, columns 4t..4t+3 (+16); B holds rows
// 4t..4t+3 (+16) of column g.
__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// S += Q Kᵀ over one 16-dimension step `ks` for 16 keys, rows key_row0 .. key_row0 + 15 of a
// swizzled K tile (one ldmatrix_x4 gives both 8-key B fragments): keys 0-7 into s_lo, 8-15 into
// s_hi. The attention kernels' shared Q·K step.
template <int D>
__device__ __forceinline__ void mma_query_keys16(float (&s_lo)[4], float (&s_hi)[4],
                                                 const uint32_t (&q)[4],
                                                 const __nv_bfloat16* k_tile, int key_row0,
                                                 int ks) {
  const int lane = threadIdx.x % 32, j = lane / 8;
  uint32_t kb[4];
  ldmatrix_x4(kb, k_tile + swizzled<D>(key_row0 + (j / 2) * 8 + (lane % 8), ks * 16 + (j % 2) * 8));
  mma_bf16(s_lo, q, kb[0], kb[1]);
  mma_bf16(s_hi, q, kb[2], kb[3]);
}

// O += P V over 16 keys, rows key_row0 .. key_row0 + 15 of a swizzled V tile (ldmatrix
// transposed), P being the A fragment of those keys' probabilities. The attention kernels' shared
// P·V step.
template <int D>
__device__ __forceinline__ void mma_probs_values16(float (&o)[D / 8][4], const uint32_t (&p)[4],
                                                   const __nv_bfloat16* v_tile, int key_row0) {
  const int lane = threadIdx.x % 32, j = lane / 8;
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    uint32_t vb[4];
    ldmatrix_x4_trans(
        vb, v_tile + swizzled<D>(key_row0 + (j % 2) * 8 + (lane % 8), dp * 16 + (j / 2) * 8));
    mma_bf16(o[2 * dp], p, vb[0], vb[1]);
    mma_bf16(o[2 * dp + 1], p, vb[2], vb[3]);
  }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The 8 bf16 values of a 16-byte load, as floats (the decode kernels' vector loads).
__device__ __forceinline__ void to_float8(const int4& packed, float (&out)[8]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __bfloat1622float2(pairs[i]);
    out[2 * i] = pair.x;
    out[2 * i + 1] = pair.y;
  }
}

// Loads `rows` rows of D bf16 into swizzled shared memory, row r from base + row_offset(r) (in
// elements); rows at or beyond `valid_rows` are zero-filled (row_offset is not called for them).
template <int D, class RowOffset>
__device__ __forceinline__ void load_rows(__nv_bfloat16* smem, const __nv_bfloat16* base, int rows,
                                          int valid_rows, RowOffset row_offset) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < rows * kChunks; i += blockDim.x) {
    const int row = i / kChunks;
    const int chunk = i % kChunks;
    const bool valid = row < valid_rows;
    const __nv_bfloat16* src = base + (valid ? row_offset(row) + chunk * 8 : 0);
    cp_async_16(smem + swizzled<D>(row, chunk * 8), src, valid);
  }
}

// The A fragments (one per 16-column k-step of the head dimension) of the 16 query rows
// row0 .. row0 + 15 of a swizzled [rows][D] tile.
template <int D>
__device__ __forceinline__ void load_query_fragments(uint32_t (&q_frag)[D / 16][4],
                                                     const __nv_bfloat16* s_q, int row0, int lane) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    ldmatrix_x4(q_frag[ks], s_q + swizzled<D>(row0 + (lane % 16), ks * 16 + (lane / 16) * 8));
}

// Rows r of base + r * stride.
template <int D>
__device__ __forceinline__ void load_tile(__nv_bfloat16* smem, const __nv_bfloat16* base,
                                          int64_t stride, int rows, int valid_rows) {
  load_rows<D>(smem, base, rows, valid_rows, [&](int row) { return row * stride; });
}

// Rows rows_of[r] of base (a gathered index list; row length D).
template <int D>
__device__ __forceinline__ void load_gather_tile(__nv_bfloat16* smem, const __nv_bfloat16* base,
                                                 const int32_t* rows_of, int rows, int valid_rows) {
  load_rows<D>(smem, base, rows, valid_rows, [&](int row) { return int64_t(rows_of[row]) * D; });
}

}  // namespace kvb::cuda
