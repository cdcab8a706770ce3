// H2O's accumulated attention (the column sums of the causal attention matrix), recomputed from the
// rows' log-sum-exp: the contract the CUDA kernel (kernels/cuda/attention_column_sums.h) is checked
// against (tests/cuda/attention_column_sums_test.cc). prefill_attention's column_sums
// (kernels/cpu/attention.h) gives the same sums as a by-product of the forward.
//
//   column_sums[a][j] += Σ_{i : j ≤ query_offset + i} exp(scale · q_{a,i} · k_{g(a),j} − lse[a][i])
//
// for j < query_offset + n_queries, with g(a) = a / (Hq / Hkv) (GQA) and lse[a][i] the natural-log
// log-sum-exp of row i's scaled logits over keys 0 .. query_offset + i, so each term is p(i -> j).
// A chunked prefill calls it once per chunk (query_offset = tokens before the chunk) into the same
// sums. Straightforward: threaded over query heads with TBB, one dot product per (query, key).
#pragma once

#include <cstdint>

namespace kvb::kernels {

struct ColumnSumsArgs {
  const float* q = nullptr;  // [n_queries, q_row_stride], query head a at column a*head_dim
  int64_t q_row_stride = 0;
  const float* k = nullptr;  // [n_kv_heads, kv_head_stride]: entry j of head h at row h, j*d
  int64_t kv_head_stride = 0;
  const float* lse = nullptr;    // [n_query_heads, n_queries], natural log
  float* column_sums = nullptr;  // [n_query_heads, sums_head_stride]; added to (callers zero it)
  int64_t sums_head_stride = 0;
  int n_queries = 0;
  int query_offset = 0;  // query i sees keys 0 .. query_offset + i
  int n_query_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0;  // 0 means 1/sqrt(head_dim)
};

// Throws std::invalid_argument when the heads do not form GQA groups or a stride is too short.
void attention_column_sums(const ColumnSumsArgs& args);

}  // namespace kvb::kernels
