// DropKV raw token scores for one layer, before pooling (docs/methods.md §9.2): the contract the
// fused CUDA scorer (kernels/cuda/dropkv_scores.cu) is checked against.
//
//   score_h[j] = (1/g) Σ_{a∈group(h)} Σ_{t<W} ω_{a,j}^(t) · max(0, ‖y_a^(t)‖² + ‖v_j‖² − 2⟨y_a^(t), v_j⟩)
//   ω = (p/(1 − p + 1e−6))²,  p = exp(q_a^(t)·k_j/√d − LSE_a^(t)) clamped to [0,1], and 0 for j > L−W+t
//
// y_a^(t) and LSE_a^(t) are the window rows' attention output and log-sum-exp (from the window
// forward). With round_p_to_bf16 (the Triton path's match_pytorch_precision) p is rounded to bf16
// before ω is formed.
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
  float* scores = nullptr;         // [Hkv, L]
};

void dropkv_raw_scores(const DropKvScoreArgs& args);

}  // namespace kvb::kernels
