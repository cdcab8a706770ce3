// CudaEngine's state (engine/cuda/cuda_engine.h), private to the two files that implement it:
// cuda_engine.cu (weights, the cache, prefill, copies and compaction) and cuda_decode_step.cu
// (the batched decode step, its CUDA graphs, ART and decode-time selection). Both run the
// transformer block stack (run_layers), so it lives here.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/cuda/compaction_rows.h"
#include "engine/cuda/cuda_decode_eviction.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/cuda_sparse_decode.h"
#include "engine/cuda/device_weights.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/early_exit_decode.h"
#include "kernels/cuda/transformer_ops.h"

namespace kvb {

struct CudaEngine::Impl {
  using bf16 = __nv_bfloat16;
  using DeviceBuffer = cuda::DeviceBuffer;
  template <typename T>
  static T* ptr(const DeviceBuffer& buffer) {
    return buffer.as<T>();
  }

  ModelConfig config;
  kernels::RopePairing pairing = kernels::RopePairing::kHalves;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceBuffer cublas_workspace;
  DeviceBuffer embedding, output_norm, output, inv_freq;
  bool tied = false;
  std::vector<CudaLayer> layers;
  int64_t weight_bytes = 0;

  // Cache.
  int batch = 0, capacity = 0;
  std::vector<DeviceBuffer> k_cache, v_cache;  // per layer
  DeviceBuffer kv_offset;                      // [L * B * Hkv] int64
  DeviceBuffer kv_length;                      // [L * B * Hkv] int32
  std::vector<int64_t> host_offset;
  std::vector<int32_t> host_length;
  std::vector<int32_t> host_position;  // next position per sequence
  CompactionRows compaction_rows;      // compact's row lists, reused between calls

  // Decode state.
  DeviceBuffer tokens, positions, decode_workspace, logits;
  // The LM head's argmax keys [B] (u64), zeroed once and left zero by every decode step.
  DeviceBuffer argmax_keys;
  DeviceBuffer residual, normed, qkv, attn_out, gate_up, act, ffn_out;
  // Whether the last run_layers folded its norms into the decode GEMVs (cuda::FoldedNorm): the
  // residual is then complete; otherwise the last down projection is still pending in ffn_out.
  bool norms_folded = false;
  DeviceBuffer norm_sums;  // the folded norms' Σv² (kFoldedNormSumsDoubles f64: FoldedNorm)
  int activation_rows = 0;
  std::optional<cuda::EarlyExitDecodeOptions> early_exit;  // ART walk in the decode step
  DeviceBuffer walker_state;                               // [B * Hkv * kStateWords] int32
  DeviceBuffer walk_counts;                                // visited, total, loaded (u64)
  std::unique_ptr<CudaSparseDecode> sparse;                // kind-D selection in the decode step
  ProjectionFitMemo fit_memo;              // the last sign-code fit, reused on the same prompt keys
  int sparse_first = 0, sparse_count = 0;  // the sequences the selection was built for
  std::unique_ptr<CudaDecodeEviction> eviction;  // kind-C eviction in the decode step

  // The decode step of one range of sequences [first, first + count) (the whole batch, or a
  // sub-batch decoded on its own) and its captured graph. Every launch of a step takes the range
  // as pointer offsets and sizes, so each range is a graph of its own.
  struct DecodeGraph {
    // Upper bound on the range's KV lengths during its captured steps (decode_length_bound_for).
    int length_bound = 0;
    int sparse_key = 0;  // the selection's step key the graph was captured at
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
  };
  // By (first, count). Few ranges occur (the batch, each sequence alone, the ranges left as the
  // batch's ends finish), but each holds an instantiated graph: past kMaxDecodeGraphs all go.
  static constexpr size_t kMaxDecodeGraphs = 64;
  std::map<std::pair<int, int>, DecodeGraph> decode_graphs;

  ~Impl() {
    drop_graph();
    if (cublas) cublasDestroy(cublas);
    if (stream) cudaStreamDestroy(stream);
  }

  int qkv_width() const { return (config.n_query_heads + 2 * config.n_kv_heads) * config.head_dim; }
  int heads_total() const { return batch * config.n_kv_heads; }

  // The stream, cuBLAS and the RoPE frequencies (cuda_engine.cu).
  void init_runtime();

  // Prefill rows whose activations (the buffers ensure_activations allocates) fit in 1 GiB: a long
  // prompt on an 8B model then holds weights + KV + ~1 GiB of workspace, where 16K-row chunks took
  // ~2.2 GiB (results/gpu-sweeps.md, 128K). Multiples of 256 rows, at least 256.
  int prefill_rows_within_activation_budget() const {
    const int64_t d = config.d_model, ffn = config.ffn_dim;
    const int64_t per_row = d * 4 + d * 2 + int64_t(qkv_width()) * 2 +
                            int64_t(config.n_query_heads) * config.head_dim * 2 + 2 * ffn * 2 +
                            ffn * 2 + d * 2;
    constexpr int64_t kActivationBytes = int64_t(1) << 30;
    return static_cast<int>(std::max<int64_t>(256, kActivationBytes / per_row / 256 * 256));
  }

  // Activation buffers for `rows` rows (cuda_engine.cu); growing them drops the decode graph.
  void ensure_activations(int rows);

  // Decode selection's metadata (codes, pages) and decode eviction's accumulated statistic describe
  // the cache they started on: once the cache is rewritten they go, and with them the graph that
  // captured their kernels.
  void forget_stale_selection() {
    if (!sparse && !eviction) return;
    sparse.reset();
    eviction.reset();
    drop_graph();
  }

  // The decode step's length bounds and graphs (cuda_decode_step.cu). drop_graph destroys every
  // range's graph (they captured buffers or methods that changed) and keeps their bounds.
  int decode_length_bound_for(int longest) const;
  void fit_decode_length_bound(DecodeGraph& step, int longest);
  void drop_graph(DecodeGraph& step);
  void drop_graph();
  // The decode attention of `rows` query rows of qkv into attn_out over layer l's ragged cache at
  // kv_offset / kv_length (per row and KV head), lengths bounded by length_bound; the caller adds
  // the workspace (cuda_decode_step.cu).
  cuda::DecodeAttentionArgs decode_attention_args(int l, int rows, const int64_t* kv_offset,
                                                  int32_t* kv_length, int length_bound) const;
  // The step of sequences [first, first + count) with KV lengths bounded by `length_bound`.
  void decode_graph_body(int first, int count, int length_bound);
  // Each (sequence, KV head) row's length bound over a captured step's life, per layer: its length
  // with the step's token, plus what the step's length bound leaves the range's longest row. The
  // dense attention splits each layer's ragged rows by them (cuda::dense_decode_chunk).
  struct DenseSplitLengths {
    DenseSplitLengths(const Impl& m, int first, int count, int length_bound);
    const int32_t* layer(int l) const { return lengths.data() + size_t(l) * rows; }
    int rows = 0;
    std::vector<int32_t> lengths;  // [n_layers][rows]
  };

  // `rows` cache rows of `buffer` from `first_row` on, as f32 [rows, head_dim].
  std::vector<float> download_rows(const DeviceBuffer& buffer, int64_t first_row,
                                   int64_t rows) const;

  const bf16* lm_head() const { return tied ? ptr<bf16>(embedding) : ptr<bf16>(output); }

  // The transformer block stack over `rows` rows already embedded in `residual`.
  // attention(layer, rope) runs the attention of that layer into attn_out; with
  // `attention_applies_rope` it also applies `rope` itself (the decode step fuses it with the KV
  // append), otherwise the rows are rotated before it is called.
  template <typename Attention>
  void run_layers(int rows, const int32_t* row_positions, bool attention_applies_rope,
                  Attention attention) {
    const int d = config.d_model, attn_width = config.n_query_heads * config.head_dim;
    const float eps = config.rms_norm_eps;
    norms_folded = cuda::norms_fold(rows, {d, attn_width, config.ffn_dim});
    if (norms_folded)
      cuda::fold_rmsnorm(ptr<float>(residual), rows, d, folded_norm(layers[0].attn_norm, 0),
                         stream);
    for (int l = 0; l < config.n_layers; ++l) {
      const CudaLayer& w = layers[l];
      if (norms_folded) {
        cuda::matmul(folded_norm(w.attn_norm, 0), ptr<bf16>(w.wqkv), ptr<bf16>(qkv), rows, d,
                     qkv_width(), stream);
      } else {
        cuda::add_rmsnorm(ptr<float>(residual), l == 0 ? nullptr : ptr<bf16>(ffn_out),
                          ptr<bf16>(w.attn_norm), rows, d, eps, ptr<bf16>(normed), stream);
        cuda::matmul(cublas, ptr<bf16>(normed), ptr<bf16>(w.wqkv), ptr<bf16>(qkv), rows, d,
                     qkv_width(), stream);
      }
      cuda::RopeArgs rope;
      rope.qkv = ptr<bf16>(qkv);
      rope.bias = w.bqkv.data() ? ptr<bf16>(w.bqkv) : nullptr;
      rope.positions = row_positions;
      rope.inv_freq = ptr<float>(inv_freq);
      rope.n = rows;
      rope.n_query_heads = config.n_query_heads;
      rope.n_kv_heads = config.n_kv_heads;
      rope.head_dim = config.head_dim;
      rope.interleaved = pairing == kernels::RopePairing::kInterleavedPairs;
      if (!attention_applies_rope) cuda::apply_rope(rope, stream);
      attention(l, rope);
      if (norms_folded) {
        const DeviceBuffer& next_gain =
            l + 1 < config.n_layers ? layers[l + 1].attn_norm : output_norm;
        const cuda::FoldedNorm ffn_norm = folded_norm(w.ffn_norm, 1);
        cuda::matmul_into_residual(ptr<bf16>(attn_out), ptr<bf16>(w.wo), ptr<float>(residual), rows,
                                   attn_width, d, ffn_norm, stream);
        cuda::gate_up_swiglu(ffn_norm, ptr<bf16>(w.w_gate_up), ptr<bf16>(act), rows, d,
                             config.ffn_dim, stream);
        cuda::matmul_into_residual(ptr<bf16>(act), ptr<bf16>(w.w_down), ptr<float>(residual), rows,
                                   config.ffn_dim, d, folded_norm(next_gain, 0), stream);
      } else {
        cuda::matmul(cublas, ptr<bf16>(attn_out), ptr<bf16>(w.wo), ptr<bf16>(ffn_out), rows,
                     attn_width, d, stream);
        cuda::add_rmsnorm(ptr<float>(residual), ptr<bf16>(ffn_out), ptr<bf16>(w.ffn_norm), rows, d,
                          eps, ptr<bf16>(normed), stream);
        cuda::gate_up_swiglu(cublas, ptr<bf16>(normed), ptr<bf16>(w.w_gate_up), ptr<bf16>(gate_up),
                             ptr<bf16>(act), rows, d, config.ffn_dim, stream);
        cuda::matmul(cublas, ptr<bf16>(act), ptr<bf16>(w.w_down), ptr<bf16>(ffn_out), rows,
                     config.ffn_dim, d, stream);
      }
    }
  }

  // The norm with `gain`, folded into the products around it. Slot 0 serves the norms before the
  // attention blocks and the LM head, slot 1 those before the MLPs, so each product after a norm
  // can zero the slot that the next producer adds into.
  cuda::FoldedNorm folded_norm(const DeviceBuffer& gain, int slot) {
    return cuda::folded_norm(ptr<bf16>(normed), ptr<double>(norm_sums), slot, ptr<bf16>(gain),
                             config.rms_norm_eps);
  }

  // The final norm of rows [first_row, first_row + rows) of `residual` (after the last layer's
  // unfolded delta, if any) into the same rows of `normed`; returns their first (cuda_engine.cu).
  bf16* output_normed_rows(int first_row, int rows);
  // Final norm of the given rows (they must be contiguous in `residual`) and the LM head
  // (cuda_engine.cu).
  void logits_for_rows(int first_row, int rows, float* out);
};

}  // namespace kvb
