// DropKV raw token scores for one layer, before pooling (docs/methods.md §9.2). CUDA twin:
// kernels/cuda/dropkv_scores.h (same name; tests/cuda/dropkv_scores_test.cc compares them).
//
//   score_h[j] = (1/g) Σ_{a∈group(h)} Σ_{t<W} ω_{a,j}^(t) · D(y_a^(t), v_j)
//   ω = (p/(1 − p + 1e−6))²,  p = exp(q_a^(t)·k_j/√d − LSE_a^(t)) clamped to [0,1], and 0 for j >
//   L−W+t D = max(0, ‖y‖² + ‖v‖² − 2⟨y, v⟩)   (the Triton scorer's expansion, what the CUDA twin
//   computes) D = Σ_i (y_i − v_i)²                  (direct_distance: the fp32
//   dropkv_scores_reference)
//
// y_a^(t) and LSE_a^(t) are the window rows' attention output and log-sum-exp (the window forward:
// prefill_attention over the last W queries, kernels/cpu/attention.h). With round_p_to_bf16 (the
// Triton path's match_pytorch_precision) p is rounded to bf16 before ω is formed. The q·k and ⟨y,
// v⟩ products of one KV head's group are two sgemms; the rest is one pass over the W·g × L
// products.
#pragma once

#include <cstdint>

namespace kvb::kernels {

struct DropKvScoreArgs {
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int length = 0;                  // L
  int window = 0;                  // W
  const float* queries = nullptr;  // [Hq, W, d]
  const float* outputs = nullptr;  // [Hq, W, d]  y
  const float* lse = nullptr;      // [Hq, W]
  const float* keys = nullptr;     // [Hkv, L, d]
  const float* values = nullptr;   // [Hkv, L, d]
  bool round_p_to_bf16 = true;
  float* scores = nullptr;  // [Hkv, L]
  bool direct_distance = false;
};

void dropkv_scores(const DropKvScoreArgs& args);

// The selection's scores from the raw ones, per head h of [n_heads, length]: pooled[h, j] = max or
// mean of raw[h, j-k/2 .. j+k/2] (PyTorch max_pool1d / avg_pool1d edges: out-of-range terms are
// left out of a max and count as zeros in a mean, which divides by `kernel`), then the last
// `protect` positions are set to the head's pooled maximum + 1, so that top-k keeps them.
void pool_and_protect(const float* raw, float* pooled, int n_heads, int length, int kernel,
                      bool max_pool, int protect);

}  // namespace kvb::kernels
