// The window attention sums of the SnapKV family (docs/methods.md §0.3), computed from the window
// queries and the keys with the casts of the bf16 reference implementations, or in plain fp32.
// CUDA twin of the same name and contract: kernels/cuda/window_attention_sums.h; tests:
// tests/kernels/window_attention_sums_test.cc, tests/cuda/backend_ops_attention.h.
//
// Window row t (t < w, w = min(window, length)) is the query at position L−w+t and sees keys
// j ≤ L−w+t. With reference_bf16_casts:
//
//   x_tj = bf16( bf16(q_t · k_j) / sqrt(d) )      q·k accumulated in fp32, sqrt(d) in fp32
//   p_tj = bf16( exp(x_tj − m_t) / Σ_{i ≤ L−w+t} exp(x_ti − m_t) ),  m_t = max_i x_ti (fp32)
//
// (a bf16 logit tensor divided by a python float, softmax in fp32, probabilities cast back to
// bf16); without, x_tj = (q_t · k_j) / sqrt(d) and p_tj is not rounded. Then, per query head a and
// key j < L:
//
//   sums[a][j] = Σ_{t<w} p_tj   (fp32, t ascending; 0 where no window row sees j)
//
// The caller rounds the sum where the reference does. The softmax's normaliser is the one of the
// rounded logits, so these sums cannot come from the prefill's own log-sum-exp. Inputs are read as
// given: the reference's q and k are bf16 tensors, so a caller with f32 rows rounds them first (the
// device reads bf16 rows). Straightforward loops, q·k in dimension order as the CUDA twin takes
// it, threaded over query heads with TBB.
#pragma once

#include <cstdint>

namespace kvb::kernels {

struct WindowAttentionSumsArgs {
  // Window row t of query head a at queries + t * query_row_stride + a * query_head_stride
  // (head_dim values); `window` rows, the last one the prompt's last position.
  const float* queries = nullptr;
  int64_t query_row_stride = 0, query_head_stride = 0;
  // Entry j of KV head h at keys + h * kv_head_stride + j * head_dim.
  const float* keys = nullptr;
  int64_t kv_head_stride = 0;
  float* sums = nullptr;  // [n_query_heads, sums_head_stride]: columns 0 .. length-1 written
  int64_t sums_head_stride = 0;
  int length = 0;  // L
  int window = 0;  // rows given; only the last min(window, L) are prompt positions and count
  int n_query_heads = 0, n_kv_heads = 0, head_dim = 0;
  bool reference_bf16_casts = false;
};

// Throws std::invalid_argument when the heads do not form GQA groups or a stride is too short.
void window_attention_sums(const WindowAttentionSumsArgs& args);

// The two steps of one window row above, also taken by the policies' host recompute
// (policies/selection.cc, window_attention), so that both give the same probabilities:
// x = bf16(bf16(q·k) / sqrt(d)) of the casts, and the fp32 softmax in place over logits[0, n)
// (max, exp, a sum in index order, each term divided by it).
float reference_bf16_logit(float product, float root);
void window_softmax(float* logits, int n);

}  // namespace kvb::kernels
