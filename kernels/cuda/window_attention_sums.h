// The window attention sums of the SnapKV family on the GPU, with the casts of the bf16 reference
// implementations or in plain fp32 (docs/methods.md §0.3). CPU twin and the formula:
// kernels/cpu/window_attention_sums.h (same name, same contract); test: the backend-ops rows of
// tests/cuda/backend_ops_attention.h.
//
//   x_tj = bf16( bf16(q_t · k_j) / sqrt(d) )  (casts)   or   (q_t · k_j) / sqrt(d)
//   p_tj = bf16( softmax over the keys row t sees ) (casts)   or the softmax unrounded
//   sums[a][j] = Σ_{t<w} p_tj   (fp32, t ascending)
//
// The normaliser is the one of the rounded logits, so the op makes its own pass over them rather
// than take the prefill's log-sum-exp. Three kernels on the CUDA cores, every q · k a sequential
// fp32 FMA chain in dimension order (the CPU twin's order):
//   1. grid (64-key chunk, KV head), one thread per key, the chunk's keys in shared memory: per
//      window row of the group, the warp's 32 logits reduce to a partial (max, Σ exp(x − max));
//   2. one warp per window row merges its partials into (m_t, s_t);
//   3. grid as 1, one thread per key: sums[a][j] = Σ_t p_tj with p_tj = exp(x_tj − m_t) / s_t
//      (rounded with the casts), each key owned by one thread: no atomics, deterministic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvb::cuda {

struct WindowAttentionSumsArgs {
  // Window row t of query head a at queries + t * query_row_stride + a * query_head_stride
  // (head_dim values); `window` rows, the last one the prompt's last position.
  const __nv_bfloat16* queries = nullptr;
  int64_t query_row_stride = 0, query_head_stride = 0;  // even
  // Entry j of KV head h at keys + h * kv_head_stride + j * head_dim.
  const __nv_bfloat16* keys = nullptr;
  int64_t kv_head_stride = 0;  // even
  float* sums = nullptr;       // [n_query_heads, sums_head_stride]: columns 0 .. length-1 written
  int64_t sums_head_stride = 0;
  int length = 0;  // L
  int window = 0;  // rows given; only the last min(window, L) are prompt positions and count
  int n_query_heads = 0, n_kv_heads = 0, head_dim = 0;  // head_dim 64, 128 or 256
  bool reference_bf16_casts = false;
  void* workspace = nullptr;  // window_attention_sums_workspace_bytes(...) bytes
};

size_t window_attention_sums_workspace_bytes(int n_query_heads, int length, int window);

// Throws std::invalid_argument when the heads do not form GQA groups, head_dim is not 64, 128 or
// 256, or queries / keys or their strides are not 4-byte aligned (bf16 pairs are read).
void window_attention_sums(const WindowAttentionSumsArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
