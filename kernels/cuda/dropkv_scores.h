// DropKV on the GPU (docs/methods.md §9.2; the fused Triton scorer's scheme). CPU twin:
// kernels/cpu/dropkv_scores.h. The window forward (outputs y and LSE) is prefill_attention
// over the last W queries, given a workspace so that it runs split-KV; this file scores every key
// without materialising the W×L attention or the W×L×d differences: each block owns a contiguous
// range of one KV head's 64-key tiles (one wave of blocks over the device) and streams their K and
// V through a cp.async ring, its window rows' q and y held in registers; it recomputes p from the
// LSE with tensor-core q·k and gets ⟨y, v⟩ from a second tensor-core product, so the squared
// distance is ‖y‖² + ‖v‖² − 2⟨y,v⟩. Then pooling and window protection here, and the top-k of
// every head by topk_select (kernels/cuda/topk_select.h: the k largest, ties to the lower index,
// ascending; the one device top-k of the project), all on the device. Tests:
// tests/cuda/backend_ops_attention.h (dropkv_scores_*), tests/cuda/backend_ops_selection.h
// (pool_and_protect_*); benchmark: tests/benchmarks/cuda_dropkv_bench.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvb::cuda {

struct DropKvScoreArgs {
  const __nv_bfloat16* queries = nullptr;  // window query t, head a at queries + t*row_stride + a*d
  const __nv_bfloat16* outputs = nullptr;  // y, same layout as the flash output
  int64_t row_stride = 0;
  const float* lse = nullptr;           // [Hq, W] natural log
  const __nv_bfloat16* keys = nullptr;  // [Hkv, head_stride]
  const __nv_bfloat16* values = nullptr;
  int64_t head_stride = 0;
  int n_query_heads = 0, n_kv_heads = 0, head_dim = 0, length = 0, window = 0;
  bool round_p_to_bf16 = true;
  float* scores = nullptr;  // [Hkv, L]
  // 64-key tiles per block; 0 sizes one wave of blocks to the device. Tests force 1 (a block per
  // tile) and many (one block walking a whole head) to cover both ends of the ring.
  int tiles_per_block = 0;
};
void dropkv_scores(const DropKvScoreArgs& args, cudaStream_t stream);

// pooled[h, j] = max or mean over j-k/2 .. j+k/2 (PyTorch max_pool1d / avg_pool1d edges), then the
// last `protect` positions of each head are set to (head max + 1). CPU twin of the same name:
// kernels/cpu/dropkv_scores.h. `pooled` may be `raw` (pooling in place, one [n_heads, length]
// buffer for both). The workspace (pool_and_protect_workspace_bytes) holds each 2,048-position
// segment's maximum and its border values: a few KB per head.
size_t pool_and_protect_workspace_bytes(int n_heads, int length, int kernel);
void pool_and_protect(const float* raw, float* pooled, int n_heads, int length, int kernel,
                      bool max_pool, int protect, void* workspace, cudaStream_t stream);

// Baseline for the benchmark: the straightforward implementation that materialises the attention
// [rows, L] and the differences [rows, L, d] per KV head in f32, as a PyTorch reference would.
// Returns the scratch bytes it needed.
size_t dropkv_scores_materialised(const DropKvScoreArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
