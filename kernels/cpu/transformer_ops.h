// The CPU twins of the forward pass's data ops and fused products of
// kernels/cuda/transformer_ops.h, of the same names and layouts, in f32 (the device's bf16 buffers
// hold the same values as f32 here): the greedy pick of the next token, which the CPU engine runs
// too, and plain references for the rest, which exist to define what the device must compute (the
// CPU engine keeps its own cache layout). The f32 <-> bf16 conversions' twins are the scalar
// f32_to_bf16 / bf16_to_f32 of kernels/cpu/dequantize.h. Tests:
// tests/kernels/transformer_ops_test.cc and, against the device, tests/cuda/backend_ops_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/rope.h"

namespace kvb::kernels {

// next[r] = argmax_j logits[r * vocab + j], the lowest index on ties (0 for a row of -inf).
void argmax_rows(const float* logits, int rows, int vocab, int32_t* next);

// residual[i, :] = table[ids[i], :] for i < n.
void embedding_gather(const float* table, const int32_t* ids, int n, int d_model, float* residual);

// Copies the K and V heads of qkv rows [n, (Hq + 2 Hkv) * head_dim] into the caches k and v. Rows
// come in groups of rows_per_seq per sequence; row i of sequence s, head h goes to slot
// kv_offset[s*Hkv+h] + kv_length[s*Hkv+h] + i (kv_length is read, not updated).
void append_kv(const float* qkv, int n, int rows_per_seq, int n_query_heads, int n_kv_heads,
               int head_dim, const int64_t* kv_offset, const int32_t* kv_length, float* k,
               float* v);

// qkv rows [n, (Hq + 2 Hkv) * head_dim], row r at position positions[r], rotated as apply_rope
// does (a bias is the caller's, as there).
struct RopeRows {
  float* qkv = nullptr;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  int n = 0;
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  RopePairing pairing = RopePairing::kHalves;
};
// The decode step, one row per sequence: rotates the Q and K heads of each row, appends its K and
// V at each head's current length (append_kv with one row per sequence), then advances those
// lengths by one.
void rope_append_kv_decode(const RopeRows& rope, const int64_t* kv_offset, int32_t* kv_length,
                           float* k, float* v);

// lengths[i] += delta for i < count; positions[i] += delta for i < n_positions (either may be
// null with a count of 0).
void advance_lengths(int32_t* lengths, int count, int32_t* positions, int n_positions, int delta);

// dst[dst_rows[i]] = src[src_rows[i]] for rows of row_elems values.
void copy_rows(const float* src, float* dst, const int64_t* src_rows, const int64_t* dst_rows,
               int64_t n_rows, int row_elems);

// The SplitMix64 finaliser (Steele, Lea and Flood 2014): fill_random_bf16's generator.
uint64_t splitmix64(uint64_t x);
// out[i] = bf16((2u - 1) * scale) with u = (splitmix64(seed * 0x100000001B3 + i) >> 40) / 2^24, a
// uniform value in [0, 1) from 24 bits: deterministic per (seed, index), whatever the split of the
// range across threads. bf16 bit patterns (round to nearest even).
void fill_random_bf16(uint16_t* out, size_t count, uint64_t seed, float scale);

// out = swiglu(x · w_gate_upᵀ) with w_gate_up = [gate; up] rows ([2 ffn, in]); gate_up
// ([n, 2 ffn]) receives the product.
void gate_up_swiglu(const float* x, const float* w_gate_up, float* gate_up, float* out, int n,
                    int in_features, int ffn);
// logits = x · wᵀ and next[r] = argmax_j logits[r, j] (lowest index on ties).
void lm_head_argmax(const float* x, const float* w, float* logits, int n, int in_features,
                    int vocab, int32_t* next);

// An RMSNorm folded into the products around it (cuda::FoldedNorm): the rows scaled by the norm's
// gain and each row's Σv² before scaling. The product after it is the plain product of the
// normalised rows scaled / sqrt(Σv² / in_features + eps).
struct FoldedNorm {
  float* scaled = nullptr;   // [n, d_model]: v · gain
  double* sum_sq = nullptr;  // [n]: Σ v²
  const float* gain = nullptr;
  float eps = 0.f;
};
// Starts the fold from residual rows [n, d_model].
void fold_rmsnorm(const float* residual, int n, int d_model, const FoldedNorm& norm);
void matmul(const FoldedNorm& x, const float* w, float* y, int n, int in_features,
            int out_features);
void gate_up_swiglu(const FoldedNorm& x, const float* w_gate_up, float* gate_up, float* out, int n,
                    int in_features, int ffn);
void lm_head_argmax(const FoldedNorm& x, const float* w, float* logits, int n, int in_features,
                    int vocab, int32_t* next);
// residual += x · wᵀ ([n, out_features]), then folds the next norm from the new residual.
void matmul_into_residual(const float* x, const float* w, float* residual, int n, int in_features,
                          int out_features, const FoldedNorm& next);

}  // namespace kvb::kernels
