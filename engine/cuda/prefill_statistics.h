// What a prefill on the GPU records for the prefill policies (CaptureRequest): the window's query
// rows, and statistics computed on the device from the layer's attention as the prefill passes, so
// that only O(L) numbers per head leave the device, never the prompt's keys and values:
// - attention column sums over all prompt queries (kernels/cuda/attention_column_sums.h);
// - window attention sums Σ_{t<w} p(t -> j): in fp32 the same kernel over the last w queries only;
//   with the bf16 reference's casts (WindowSumsRequest) kernels/cuda/window_attention_sums.h, whose
//   softmax runs over the rounded logits;
// - output-perturbation scores of a window (kernels/cuda/dropkv_scores.h), from the window rows'
//   attention output and log-sum-exp the prefill has just computed;
// - key norms (kernels/cuda/row_norms.h);
// - CriticalKV's value norms (1/g) Σ_a ‖v_j W_o^a‖₁ (kernels/cuda/projected_value_norms.h).
// Statistics other than the window queries need a prefill that starts on an empty sequence and
// whose last chunk holds every window row (prefill_chunk_size arranges that).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/model_config.h"
#include "engine/prefill_capture.h"
#include "kernels/cuda/cuda_utils.h"

namespace kvb {

// Chunk length for a prefill of `total` tokens in chunks of at most `limit`: chunks of equal
// length (the last one no shorter than the others by more than the chunk count), so that the last
// chunk holds any window a policy scores with.
int prefill_chunk_size(int total, int limit);

// One layer's attention over one prefill chunk: rows begin .. begin + n - 1 of the prompt.
struct ChunkAttention {
  int layer = 0;
  int begin = 0, n = 0;
  const __nv_bfloat16* q = nullptr;  // [n, q_row_stride] post-RoPE, head a at column a * d
  int64_t q_row_stride = 0;
  const __nv_bfloat16* out = nullptr;  // [n, Hq * d] the attention output of the rows
  const float* lse = nullptr;          // [Hq, n] when lse_for_chunk asked for it
  const __nv_bfloat16* k = nullptr;    // the sequence's cache: head h at k + h * kv_head_stride
  const __nv_bfloat16* v = nullptr;
  int64_t kv_head_stride = 0;
  const __nv_bfloat16* output_projection = nullptr;  // the layer's W_o [d_model, Hq * d]
};

class PrefillStatistics {
 public:
  // Allocates what `request` needs for a prefill of `total` tokens in chunks of `chunk` rows,
  // starting at `start_length` cached entries (InputError when a statistic needs an empty start).
  PrefillStatistics(const ModelConfig& config, const CaptureRequest& request, int total, int chunk,
                    int start_length, cudaStream_t stream, cublasHandle_t cublas);

  // Where flash attention should write the chunk's row log-sum-exp, or nullptr when no statistic
  // reads it.
  float* lse_for_chunk(int begin, int n);
  // After the attention of one layer over one chunk (enqueued on the stream).
  void after_attention(const ChunkAttention& chunk);
  // After the stream finished the prefill: the captures, on the host.
  void download(PrefillCapture& capture) const;

 private:
  bool is_last_chunk(int begin, int n) const { return begin + n == total_; }
  int window_of(int requested) const;
  void copy_window_rows(const ChunkAttention& chunk, int window);
  // Adds to `sums` [Hq, total] the attention of `n_queries` query rows [n_queries, q_row_stride]
  // (the first at prompt position `query_offset`, row log-sum-exp `lse` [Hq, n_queries]) on the
  // chunk's layer cache.
  void add_column_sums(const ChunkAttention& chunk, const __nv_bfloat16* q, int64_t q_row_stride,
                       const float* lse, int n_queries, int query_offset, float* sums);
  void window_sums(const ChunkAttention& chunk);
  void perturbations(const ChunkAttention& chunk);
  void key_norms(const ChunkAttention& chunk);
  void projected_value_norms(const ChunkAttention& chunk);

  const ModelConfig& config_;
  CaptureRequest request_;
  int total_ = 0;
  int query_window_ = 0;  // window queries downloaded
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<std::vector<__nv_bfloat16>> window_rows_;    // per layer [w, Hq * d], host
  cuda::DeviceBuffer row_lse_;                             // [Hq, chunk]
  cuda::DeviceBuffer window_lse_, window_q_, window_out_;  // the last chunk's window rows, compact
  std::vector<cuda::DeviceBuffer> column_sums_;            // per layer [Hq, total]
  std::vector<std::vector<cuda::DeviceBuffer>> window_sums_;  // [request][layer] [Hq, total]
  cuda::DeviceBuffer window_sums_workspace_;  // for the requests with the reference's casts
  std::vector<std::vector<cuda::DeviceBuffer>> perturbations_;  // [request][layer] [Hkv, total]
  std::vector<cuda::DeviceBuffer> key_norms_;                   // per layer [Hkv, total]
  std::vector<cuda::DeviceBuffer> value_norms_;                 // per layer [Hkv, total]
  cuda::DeviceBuffer projection_workspace_;
};

}  // namespace kvb
