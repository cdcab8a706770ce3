#include <algorithm>
#include <cmath>
#include <string>

#include "common/errors.h"
#include "engine/cuda/prefill_statistics.h"
#include "kernels/cuda/attention_column_sums.h"
#include "kernels/cuda/dropkv_scores.h"
#include "kernels/cuda/projected_value_norms.h"
#include "kernels/cuda/row_norms.h"
#include "kernels/cuda/window_attention_sums.h"

namespace kvb {

using bf16 = __nv_bfloat16;
using cuda::DeviceBuffer;

int prefill_chunk_size(int total, int limit) {
  if (total <= limit) return std::max(total, 1);
  const int chunks = (total + limit - 1) / limit;
  return (total + chunks - 1) / chunks;
}

namespace {

std::vector<DeviceBuffer> zeroed_per_layer(int layers, int64_t floats, const char* label,
                                           cudaStream_t stream) {
  std::vector<DeviceBuffer> buffers;
  for (int l = 0; l < layers; ++l) {
    buffers.emplace_back(floats * 4, label);
    cuda::check(cudaMemsetAsync(buffers.back().data(), 0, buffers.back().bytes(), stream), label);
  }
  return buffers;
}

std::vector<std::vector<float>> download_per_layer(const std::vector<DeviceBuffer>& buffers) {
  std::vector<std::vector<float>> out;
  for (const DeviceBuffer& buffer : buffers) {
    out.emplace_back(buffer.bytes() / 4);
    buffer.download(out.back().data(), buffer.bytes());
  }
  return out;
}

}  // namespace

PrefillStatistics::PrefillStatistics(const ModelConfig& config, const CaptureRequest& request,
                                     int total, int chunk, int start_length, cudaStream_t stream,
                                     cublasHandle_t cublas)
    : config_(config), request_(request), total_(total), stream_(stream), cublas_(cublas) {
  const ModelConfig& c = config_;
  query_window_ = std::clamp(request.window_queries, 0, total);
  if (query_window_ > 0)
    window_rows_.assign(c.n_layers,
                        std::vector<bf16>(size_t(query_window_) * c.n_query_heads * c.head_dim));
  const bool statistics = request.attention_column_sums || !request.window_attention_sums.empty() ||
                          !request.output_perturbations.empty() || request.key_norms ||
                          request.projected_value_norms;
  if (!statistics) return;
  if (start_length != 0)
    throw InputError(
        "prefill: attention statistics are captured for a prefill on an empty "
        "sequence only (this one starts after " +
        std::to_string(start_length) + " cached entries)");
  const int64_t hq_total = int64_t(c.n_query_heads) * total;
  const int64_t hkv_total = int64_t(c.n_kv_heads) * total;
  if (request.attention_column_sums)
    column_sums_ = zeroed_per_layer(c.n_layers, hq_total, "column sums", stream);
  for (size_t i = 0; i < request.window_attention_sums.size(); ++i)
    window_sums_.push_back(zeroed_per_layer(c.n_layers, hq_total, "window sums", stream));
  for (size_t i = 0; i < request.output_perturbations.size(); ++i)
    perturbations_.push_back(
        zeroed_per_layer(c.n_layers, hkv_total, "perturbation scores", stream));
  if (request.key_norms) key_norms_ = zeroed_per_layer(c.n_layers, hkv_total, "key norms", stream);
  if (request.projected_value_norms) {
    value_norms_ = zeroed_per_layer(c.n_layers, hkv_total, "projected value norms", stream);
    projection_workspace_ = DeviceBuffer(
        cuda::projected_value_norms_workspace_floats(c.d_model) * 4, "projected value workspace");
  }
  row_lse_ = DeviceBuffer(int64_t(c.n_query_heads) * chunk * 4, "row lse");
  int widest = 0, widest_with_casts = 0;
  for (const WindowSumsRequest& w : request.window_attention_sums) {
    widest = std::max(widest, window_of(w.window));
    if (w.reference_bf16_casts)
      widest_with_casts = std::max(widest_with_casts, window_of(w.window));
  }
  if (widest_with_casts > 0)
    window_sums_workspace_ = DeviceBuffer(
        cuda::window_attention_sums_workspace_bytes(c.n_query_heads, total, widest_with_casts),
        "window sums workspace");
  for (const auto& p : request.output_perturbations) widest = std::max(widest, window_of(p.window));
  if (widest > 0) {
    if (widest > total - (total - 1) / chunk * chunk)
      throw std::logic_error(
          "PrefillStatistics: the last prefill chunk is shorter than the window");
    const int64_t q_width = int64_t(c.n_query_heads) * c.head_dim;
    window_lse_ = DeviceBuffer(int64_t(c.n_query_heads) * widest * 4, "window lse");
    window_q_ = DeviceBuffer(widest * q_width * 2, "window queries");
    window_out_ = DeviceBuffer(widest * q_width * 2, "window outputs");
  }
}

int PrefillStatistics::window_of(int requested) const { return std::clamp(requested, 0, total_); }

float* PrefillStatistics::lse_for_chunk(int begin, int n) {
  const bool window_statistics =
      !request_.window_attention_sums.empty() || !request_.output_perturbations.empty();
  if (request_.attention_column_sums || (window_statistics && is_last_chunk(begin, n)))
    return row_lse_.as<float>();
  return nullptr;
}

void PrefillStatistics::after_attention(const ChunkAttention& chunk) {
  const ModelConfig& c = config_;
  const int q_width = c.n_query_heads * c.head_dim;
  const int window_from = std::max(total_ - query_window_, chunk.begin);  // first window row here
  const int window_count = query_window_ > 0 ? std::max(0, chunk.begin + chunk.n - window_from) : 0;
  if (window_count > 0)
    cuda::check(cudaMemcpy2DAsync(window_rows_[chunk.layer].data() +
                                      size_t(window_from - (total_ - query_window_)) * q_width,
                                  q_width * 2,
                                  chunk.q + int64_t(window_from - chunk.begin) * chunk.q_row_stride,
                                  chunk.q_row_stride * 2, q_width * 2, window_count,
                                  cudaMemcpyDeviceToHost, stream_),
                "window queries download");
  if (!column_sums_.empty())
    add_column_sums(chunk, chunk.q, chunk.q_row_stride, chunk.lse, chunk.n, chunk.begin,
                    column_sums_[chunk.layer].as<float>());
  if (!is_last_chunk(chunk.begin, chunk.n)) return;
  window_sums(chunk);
  perturbations(chunk);
  key_norms(chunk);
  projected_value_norms(chunk);
}

void PrefillStatistics::copy_window_rows(const ChunkAttention& chunk, int window) {
  const ModelConfig& c = config_;
  const int64_t q_width = int64_t(c.n_query_heads) * c.head_dim;
  const int first = chunk.n - window;  // the window's first row in the chunk
  // lse [Hq, n] -> [Hq, window]; query and output rows -> [window, Hq * d].
  cuda::check(cudaMemcpy2DAsync(window_lse_.data(), window * 4, chunk.lse + first, chunk.n * 4,
                                window * 4, c.n_query_heads, cudaMemcpyDeviceToDevice, stream_),
              "window lse");
  cuda::check(cudaMemcpy2DAsync(
                  window_q_.data(), q_width * 2, chunk.q + int64_t(first) * chunk.q_row_stride,
                  chunk.q_row_stride * 2, q_width * 2, window, cudaMemcpyDeviceToDevice, stream_),
              "window queries");
  cuda::check(cudaMemcpyAsync(window_out_.data(), chunk.out + first * q_width, window * q_width * 2,
                              cudaMemcpyDeviceToDevice, stream_),
              "window outputs");
}

void PrefillStatistics::window_sums(const ChunkAttention& chunk) {
  const ModelConfig& c = config_;
  for (size_t i = 0; i < window_sums_.size(); ++i) {
    const WindowSumsRequest& request = request_.window_attention_sums[i];
    const int window = window_of(request.window);
    if (window == 0) continue;
    copy_window_rows(chunk, window);
    float* sums = window_sums_[i][chunk.layer].as<float>();
    if (!request.reference_bf16_casts) {  // fp32: the prefill's log-sum-exp serves
      add_column_sums(chunk, window_q_.as<bf16>(), int64_t(c.n_query_heads) * c.head_dim,
                      window_lse_.as<float>(), window, total_ - window, sums);
      continue;
    }
    // The reference's rounded logits have a softmax normaliser of their own: the op computes it.
    cuda::WindowAttentionSumsArgs a;
    a.queries = window_q_.as<bf16>();
    a.query_row_stride = int64_t(c.n_query_heads) * c.head_dim;
    a.query_head_stride = c.head_dim;
    a.keys = chunk.k;
    a.kv_head_stride = chunk.kv_head_stride;
    a.sums = sums;
    a.sums_head_stride = total_;
    a.length = total_;
    a.window = window;
    a.n_query_heads = c.n_query_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.reference_bf16_casts = true;
    a.workspace = window_sums_workspace_.data();
    cuda::window_attention_sums(a, stream_);
  }
}

void PrefillStatistics::add_column_sums(const ChunkAttention& chunk, const bf16* q,
                                        int64_t q_row_stride, const float* lse, int n_queries,
                                        int query_offset, float* sums) {
  cuda::ColumnSumsArgs cs;
  cs.q = q;
  cs.q_row_stride = q_row_stride;
  cs.k = chunk.k;
  cs.kv_head_stride = chunk.kv_head_stride;
  cs.lse = lse;
  cs.column_sums = sums;
  cs.sums_head_stride = total_;
  cs.n_queries = n_queries;
  cs.query_offset = query_offset;
  cs.n_query_heads = config_.n_query_heads;
  cs.n_kv_heads = config_.n_kv_heads;
  cs.head_dim = config_.head_dim;
  cuda::attention_column_sums(cs, stream_);
}

void PrefillStatistics::perturbations(const ChunkAttention& chunk) {
  const ModelConfig& c = config_;
  for (size_t i = 0; i < perturbations_.size(); ++i) {
    const int window = window_of(request_.output_perturbations[i].window);
    if (window == 0) continue;
    copy_window_rows(chunk, window);
    cuda::DropKvScoreArgs a;
    a.queries = window_q_.as<bf16>();
    a.outputs = window_out_.as<bf16>();
    a.row_stride = int64_t(c.n_query_heads) * c.head_dim;
    a.lse = window_lse_.as<float>();
    a.keys = chunk.k;
    a.values = chunk.v;
    a.head_stride = chunk.kv_head_stride;
    a.n_query_heads = c.n_query_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.length = total_;
    a.window = window;
    a.round_p_to_bf16 = request_.output_perturbations[i].round_p_to_bf16;
    a.scores = perturbations_[i][chunk.layer].as<float>();
    cuda::dropkv_scores(a, stream_);
  }
}

void PrefillStatistics::key_norms(const ChunkAttention& chunk) {
  if (key_norms_.empty()) return;
  cuda::RowNormsArgs a;
  a.rows = chunk.k;
  a.head_stride = chunk.kv_head_stride;
  a.n_heads = config_.n_kv_heads;
  a.length = total_;
  a.dim = config_.head_dim;
  a.norms = key_norms_[chunk.layer].as<float>();
  cuda::row_norms(a, stream_);
}

void PrefillStatistics::projected_value_norms(const ChunkAttention& chunk) {
  if (value_norms_.empty()) return;
  cuda::ProjectedValueNormsArgs a;
  a.values = chunk.v;
  a.head_stride = chunk.kv_head_stride;
  a.output_projection = chunk.output_projection;
  a.n_query_heads = config_.n_query_heads;
  a.n_kv_heads = config_.n_kv_heads;
  a.length = total_;
  a.dim = config_.head_dim;
  a.hidden = config_.d_model;
  a.norms = value_norms_[chunk.layer].as<float>();
  a.workspace = projection_workspace_.as<float>();
  cuda::projected_value_norms(cublas_, a, stream_);
}

void PrefillStatistics::download(PrefillCapture& capture) const {
  const ModelConfig& c = config_;
  capture.length = total_;
  capture.window = query_window_;
  capture.query_window.assign(window_rows_.size(), {});
  for (size_t l = 0; l < window_rows_.size(); ++l) {  // [window, Hq, d] -> [Hq, window, d]
    std::vector<float>& q = capture.query_window[l];
    q.resize(window_rows_[l].size());
    const size_t q_width = size_t(c.n_query_heads) * c.head_dim;
    for (int t = 0; t < query_window_; ++t)
      for (int a = 0; a < c.n_query_heads; ++a)
        for (int i = 0; i < c.head_dim; ++i)
          q[(size_t(a) * query_window_ + t) * c.head_dim + i] =
              __bfloat162float(window_rows_[l][t * q_width + a * c.head_dim + i]);
  }
  capture.column_sums = download_per_layer(column_sums_);
  capture.window_attention_sums.clear();
  for (size_t i = 0; i < window_sums_.size(); ++i)
    capture.window_attention_sums.push_back(
        {request_.window_attention_sums[i], download_per_layer(window_sums_[i])});
  capture.output_perturbations.clear();
  for (size_t i = 0; i < perturbations_.size(); ++i)
    capture.output_perturbations.push_back(
        {request_.output_perturbations[i], download_per_layer(perturbations_[i])});
  capture.key_norms = download_per_layer(key_norms_);
  capture.projected_value_norms = download_per_layer(value_norms_);
}

}  // namespace kvb
