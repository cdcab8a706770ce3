// The forward pass's other GPU kernels in bf16 with f32 math: embedding gather, KV append, row
// copies, argmax, conversions, and the bf16 GEMM/GEMV with its folded norms. CPU twins of the same
// names: kernels/cpu/transformer_ops.h (matmul and matmul_f32out: kernels/cpu/matmul.h's matmul;
// the conversions: kernels/cpu/dequantize.h). The element-wise ops with CPU twins of the same name
// have their own files, included here for the engine: rmsnorm.h, rope.h, activations.h. Tests:
// tests/cuda/backend_ops_test.cc (every op against its twin) and tests/cuda/.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/activations.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"

namespace kvb::cuda {

// out[i, :] = table[ids[i], :] (bf16 rows); also initialises the f32 residual stream.
void embedding_gather(const __nv_bfloat16* table, const int32_t* ids, int n, int d_model,
                      float* residual, cudaStream_t stream);

// The decode step's append inside the attention kernel (DecodeAppend), for the rotation `rope`
// describes, into the given cache buffers and lengths.
inline DecodeAppend decode_append_for(const RopeArgs& rope, __nv_bfloat16* k_cache,
                                      __nv_bfloat16* v_cache, int32_t* kv_length) {
  return {.positions = rope.positions,
          .inv_freq = rope.inv_freq,
          .bias = rope.bias,
          .interleaved = rope.interleaved,
          .k_cache = k_cache,
          .v_cache = v_cache,
          .kv_length = kv_length};
}

// Copies the K and V heads of qkv rows into the cache. Rows come in groups of rows_per_seq per
// sequence (a prefill chunk: one sequence, rows_per_seq = n; a batched decode step: rows_per_seq
// = 1). Row i of sequence s, head h goes to slot kv_offset[s*Hkv+h] + kv_length[s*Hkv+h] + i
// (kv_length is read, not updated: advance_lengths does that).
void append_kv(const __nv_bfloat16* qkv, int n, int rows_per_seq, int n_query_heads, int n_kv_heads,
               int head_dim, const int64_t* kv_offset, const int32_t* kv_length, __nv_bfloat16* k,
               __nv_bfloat16* v, cudaStream_t stream);
// The decode step's fusion of apply_rope and append_kv (rope.n rows, one per sequence): rotates the
// row, appends its K and V at each head's current length, then advances those lengths by one.
void rope_append_kv_decode(const RopeArgs& rope, const int64_t* kv_offset, int32_t* kv_length,
                           __nv_bfloat16* k, __nv_bfloat16* v, cudaStream_t stream);
// lengths[i] += delta for i < count; positions[i] += delta for i < n_positions (device-side, so a
// decode step can be replayed from a CUDA graph).
void advance_lengths(int32_t* lengths, int count, int32_t* positions, int n_positions, int delta,
                     cudaStream_t stream);
// dst[dst_rows[i]] = src[src_rows[i]] for rows of row_elems bf16, any row_elems (a gather; src and
// dst must not overlap: compaction gathers into scratch and copies back).
void copy_rows(const __nv_bfloat16* src, __nv_bfloat16* dst, const int64_t* src_rows,
               const int64_t* dst_rows, int64_t n_rows, int row_elems, cudaStream_t stream);
// next[b] = argmax_j logits[b, j] (lowest index on ties).
void argmax_rows(const float* logits, int rows, int vocab, int32_t* next, cudaStream_t stream);

void f32_to_bf16(const float* in, size_t count, __nv_bfloat16* out, cudaStream_t stream);
void bf16_to_f32(const __nv_bfloat16* in, size_t count, float* out, cudaStream_t stream);
// Deterministic uniform(-scale, scale) bf16 values from (seed, index): dummy-preset weights.
void fill_random_bf16(__nv_bfloat16* out, size_t count, uint64_t seed, float scale,
                      cudaStream_t stream);

// y[n, out] = x[n, in] · w[out, in]^T, bf16 in/out, f32 accumulation: a bandwidth-bound GEMV
// kernel for n <= 4 (decode), cuBLAS otherwise (the tensor-core kernel below for 5 to
// kSkinnyMaxRows rows with KVB_CUDA_SKINNY_MMA=1).
void matmul(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
            int n, int in_features, int out_features, cudaStream_t stream);
// Same with f32 output (logits).
void matmul_f32out(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y,
                   int n, int in_features, int out_features, cudaStream_t stream);

// The tensor-core kernel for 5 to kSkinnyMaxRows rows (in_features % 8 == 0) that streams each
// weight once for every row, f32 output; throws for other shapes. matmul takes it only with
// KVB_CUDA_SKINNY_MMA=1 (cuBLAS measured faster, results/gpu-sweeps.md); tests call it directly.
void matmul_skinny_mma(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int n,
                       int in_features, int out_features, cudaStream_t stream);

// The decode step's fused MLP input: out = swiglu(x · w_gate_upᵀ) with w_gate_up = [gate; up] rows
// ([2 ffn, in]). For n <= 4 one GEMV streams gate row j and up row j together and writes
// silu(gate)·up (the same bf16 roundings as matmul then swiglu, bit for bit), so neither the
// [n, 2 ffn] product nor a second kernel is needed; otherwise matmul into `gate_up`, then
// swiglu.
void gate_up_swiglu(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w_gate_up,
                    __nv_bfloat16* gate_up, __nv_bfloat16* out, int n, int in_features, int ffn,
                    cudaStream_t stream);
// logits = x · wᵀ (f32) and next[r] = argmax_j logits[r, j] (lowest index on ties), as
// matmul_f32out then argmax_rows. For n <= 4 the GEMV reduces the maxima itself through
// `best` (n words, zero before the first call, left zero) and one tiny kernel writes `next`.
void lm_head_argmax(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                    float* logits, int n, int in_features, int vocab, unsigned long long* best,
                    int32_t* next, cudaStream_t stream);

// The most rows the decode GEMV takes, and the tensor-core kernel's (matmul_skinny_mma).
constexpr int kDecodeGemvMaxRows = 4;
constexpr int kSkinnyMaxRows = 16;

// The decode step's RMSNorms folded into the products around them, for the GEMV's n <= 4 rows
// (norms_fold says whether every product of the step takes it; KVB_CUDA_FUSED_NORM=0 says no). The
// product that adds into the residual stream (o, down: matmul_into_residual) also writes
// `scaled` = bf16(v · gain), with v the new residual and gain the next norm's weight, and adds Σv²
// per row into `sum_sq`. The product after the norm (qkv, gate/up, LM head) streams `scaled` as its
// input and multiplies its sums by 1/sqrt(mean(v²) + eps). The step then runs no norm kernel (each
// was a launch boundary: results/gpu-kernel-tuning.md §2.1); the rows are rounded to bf16 before
// the norm's scale instead of after it. Two sum slots alternate: the product after a norm zeroes
// `other_sum_sq`, which the next producer adds into. fold_rmsnorm starts the chain from a residual
// that no product wrote (the embeddings).
// A slot holds its rows' sums on kFoldedNormLines 128-byte lines (folded_norm_word); each
// producer block adds into one line (its index modulo the count), so ~2,000 blocks do not queue on
// one address, and the consumer adds the lines in a fixed order (one line measurably slowed the o
// product: results/gpu-kernel-tuning.md §2.2).
constexpr int kFoldedNormLines = 4;
constexpr int kFoldedNormLineDoubles = 16;
constexpr int kFoldedNormSlotDoubles = kFoldedNormLines * kFoldedNormLineDoubles;
constexpr int kFoldedNormSumsDoubles = 2 * kFoldedNormSlotDoubles;  // the two slots' buffer
// Where row `row`'s sum on line `line` lies within a slot.
__host__ __device__ constexpr int folded_norm_word(int line, int row) {
  return line * kFoldedNormLineDoubles + row;
}
struct FoldedNorm {
  __nv_bfloat16* scaled = nullptr;  // [n, d_model]
  double* sum_sq = nullptr;         // a slot: [kFoldedNormLines][kFoldedNormLineDoubles]
  double* other_sum_sq = nullptr;   // the other slot
  const __nv_bfloat16* gain = nullptr;
  float eps = 0.f;
};
// Sum slot `slot` (0 or 1) of `sums` (kFoldedNormSumsDoubles f64) for the norm with `gain`, the
// other slot being the one its product zeroes; `scaled` is the rows' bf16 input buffer.
inline FoldedNorm folded_norm(__nv_bfloat16* scaled, double* sums, int slot,
                              const __nv_bfloat16* gain, float eps) {
  return {.scaled = scaled,
          .sum_sq = sums + slot * kFoldedNormSlotDoubles,
          .other_sum_sq = sums + (1 - slot) * kFoldedNormSlotDoubles,
          .gain = gain,
          .eps = eps};
}
bool norms_fold(int n, std::initializer_list<int> in_features);
// scaled = bf16(residual · gain) and sum_sq = Σ residual² (stored on line 0, the other lines
// zeroed), one block per row.
void fold_rmsnorm(const float* residual, int n, int d_model, const FoldedNorm& norm,
                  cudaStream_t stream);
void matmul(const FoldedNorm& x, const __nv_bfloat16* w, __nv_bfloat16* y, int n, int in_features,
            int out_features, cudaStream_t stream);
void gate_up_swiglu(const FoldedNorm& x, const __nv_bfloat16* w_gate_up, __nv_bfloat16* out, int n,
                    int in_features, int ffn, cudaStream_t stream);
void lm_head_argmax(const FoldedNorm& x, const __nv_bfloat16* w, float* logits, int n,
                    int in_features, int vocab, unsigned long long* best, int32_t* next,
                    cudaStream_t stream);
// residual += x · wᵀ, the product rounded to bf16 first (bit for bit matmul into a delta, then
// add_rmsnorm's add), with the next norm folded in as above.
void matmul_into_residual(const __nv_bfloat16* x, const __nv_bfloat16* w, float* residual, int n,
                          int in_features, int out_features, const FoldedNorm& next,
                          cudaStream_t stream);

// Reads `bytes` of device memory and returns the achieved GB/s (best of `repeats`): the
// bandwidth ceiling that bench ratios are taken against.
double measure_read_bandwidth_gbs(size_t bytes, int repeats);
// bf16 GEMM rate in TFLOP/s at m=n=k=`size` (best of `repeats`).
double measure_gemm_tflops(cublasHandle_t handle, int size, int repeats);

}  // namespace kvb::cuda
