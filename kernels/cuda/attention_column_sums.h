// H2O's accumulated attention on the GPU: the column sums of the causal attention matrix,
// recomputed from the rows' log-sum-exp (prefill_attention's `lse`, kernels/cuda/attention.h)
// after the prefill's attention. CPU twin and contract: kernels/cpu/attention_column_sums.h.
// Test: tests/cuda/attention_column_sums_test.cc.
//
//   column_sums[a][j] += Σ_{i : j ≤ query_offset + i} exp(scale · q_{a,i} · k_{g(a),j} − lse[a][i])
//
// for j < query_offset + n_queries, g(a) = a / (Hq / Hkv). A chunked prefill calls it once per
// chunk with query_offset = tokens before the chunk, into the same sums.
//
// One thread block per (key tile, query head) owns the tile's sums, so nothing is atomic. Its
// 4 warps each hold 16·M keys (M = 4, 2, 1 m16 tiles at head_dim 64, 128, 256: as many as the
// registers allow) as the A operand of m16n8k16 tensor-core products for the whole call; the
// queries that see the tile stream through shared memory 64 rows at a time (the next tile's copy
// in flight while this one is computed); p = 2^(s·scale·log2 e − lse·log2 e) in f32 on the
// special-function unit (terms below 2^-126 flush to zero) goes into per-thread sums, reduced
// over the quad at the end. Tiles on the causal diagonal start at the first query that sees them.
// Keys per warp set the cost: every warp reads the whole query tile per pass, so shared-memory
// traffic per logit is head_dim / (8 M) bytes. Benchmark: cuda_kernels_bench
// BM_AttentionColumnSums, beside the prefill's own time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

struct ColumnSumsArgs {
  // [n_queries, q_row_stride], post-RoPE; query head a at column a*head_dim.
  const __nv_bfloat16* q = nullptr;
  int64_t q_row_stride = 0;  // a multiple of 8
  // [n_kv_heads, kv_head_stride] rows of head_dim: entry j of head h at
  // k + h*kv_head_stride + j*head_dim.
  const __nv_bfloat16* k = nullptr;
  int64_t kv_head_stride = 0;  // a multiple of 8
  // [n_query_heads, n_queries]: natural-log log-sum-exp of row i's scaled logits over its visible
  // keys (prefill_attention's lse).
  const float* lse = nullptr;
  // [n_query_heads, sums_head_stride]: ADDS Σ_i p(i -> j) for j < query_offset + n_queries
  // (callers zero it); columns beyond are left alone.
  float* column_sums = nullptr;
  int64_t sums_head_stride = 0;
  int n_queries = 0;
  int query_offset = 0;                                 // query i sees keys 0 .. query_offset + i
  int n_query_heads = 0, n_kv_heads = 0, head_dim = 0;  // head_dim 64, 128 or 256
  float scale = 0;                                      // 0 means 1/sqrt(head_dim)
};

// Throws std::invalid_argument when the heads do not form GQA groups, head_dim is not 64, 128 or
// 256, or q / k or their strides are not 16-byte aligned.
void attention_column_sums(const ColumnSumsArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
