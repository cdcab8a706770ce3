// CudaEngine (engine/cuda/cuda_engine.h): weights, the cache, prefill, copies and compaction. The
// decode step, its graphs and decode-time methods are in cuda_decode_step.cu; the state both share
// is cuda_engine_impl.h.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/errors.h"
#include "engine/cuda/compaction_rows.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/cuda_engine_impl.h"
#include "engine/cuda/cuda_sparse_decode.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/prefill_statistics.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/early_exit_decode.h"
#include "kernels/cuda/transformer_ops.h"

namespace kvb {

using cuda::DeviceBuffer;
using bf16 = __nv_bfloat16;

namespace {

uint16_t to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return 0x7fc0;  // NaN
  bits += 0x7fff + ((bits >> 16) & 1);                  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

DeviceBuffer upload_bf16(const std::vector<float>& host, const char* label) {
  std::vector<uint16_t> bits(host.size());
  for (size_t i = 0; i < host.size(); ++i) bits[i] = to_bf16_bits(host[i]);
  DeviceBuffer buffer(bits.size() * 2, label);
  buffer.upload(bits.data(), bits.size() * 2);
  return buffer;
}

DeviceBuffer concat_bf16(const std::vector<const std::vector<float>*>& parts, const char* label) {
  std::vector<float> all;
  for (const auto* part : parts) all.insert(all.end(), part->begin(), part->end());
  return upload_bf16(all, label);
}

// Host matrices may be GGUF blocks or 16-bit: dequantised to f32 one tensor at a time.
DeviceBuffer upload_bf16(const WeightMatrix& host, const char* label) {
  return upload_bf16(host.to_f32(), label);
}

DeviceBuffer concat_matrices_bf16(const std::vector<const WeightMatrix*>& parts,
                                  const char* label) {
  std::vector<float> all;
  for (const auto* part : parts) {
    const std::vector<float> values = part->to_f32();
    all.insert(all.end(), values.begin(), values.end());
  }
  return upload_bf16(all, label);
}

template <typename T>
T* ptr(const DeviceBuffer& buffer) {
  return buffer.as<T>();
}

}  // namespace

void CudaEngine::Impl::init_runtime() {
  cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasCreate failed");
  cublas_workspace = DeviceBuffer(32 << 20, "cuBLAS workspace");
  cublasSetWorkspace(cublas, cublas_workspace.data(), cublas_workspace.bytes());
  cublasSetStream(cublas, stream);
  std::vector<float> freq =
      config.llama3_rope_scaling
          ? kernels::rope_inverse_frequencies_llama3(
                config.head_dim, config.rope_theta,
                {config.llama3_rope_scaling->factor, config.llama3_rope_scaling->low_freq_factor,
                 config.llama3_rope_scaling->high_freq_factor,
                 config.llama3_rope_scaling->original_max_position})
          : kernels::rope_inverse_frequencies(config.head_dim, config.rope_theta);
  inv_freq = DeviceBuffer(freq.size() * 4, "rope frequencies");
  inv_freq.upload(freq.data(), freq.size() * 4);
}

void CudaEngine::Impl::ensure_activations(int rows) {
  if (rows <= activation_rows) return;
  const int64_t d = config.d_model;
  residual = DeviceBuffer(rows * d * 4, "activations");
  normed = DeviceBuffer(rows * d * 2, "activations");
  qkv = DeviceBuffer(int64_t(rows) * qkv_width() * 2, "activations");
  attn_out =
      DeviceBuffer(int64_t(rows) * config.n_query_heads * config.head_dim * 2, "activations");
  gate_up = DeviceBuffer(int64_t(rows) * 2 * config.ffn_dim * 2, "activations");
  act = DeviceBuffer(int64_t(rows) * config.ffn_dim * 2, "activations");
  ffn_out = DeviceBuffer(rows * d * 2, "activations");
  norm_sums = DeviceBuffer(cuda::kFoldedNormSumsDoubles * sizeof(double), "activations");
  activation_rows = rows;
  drop_graph();
}

bf16* CudaEngine::Impl::output_normed_rows(int first_row, int rows) {
  const int d = config.d_model;
  bf16* norm_out = ptr<bf16>(normed) + int64_t(first_row) * d;
  cuda::add_rmsnorm(ptr<float>(residual) + int64_t(first_row) * d,
                    norms_folded ? nullptr : ptr<bf16>(ffn_out) + int64_t(first_row) * d,
                    ptr<bf16>(output_norm), rows, d, config.rms_norm_eps, norm_out, stream);
  return norm_out;
}

void CudaEngine::Impl::logits_for_rows(int first_row, int rows, float* out) {
  cuda::matmul_f32out(cublas, output_normed_rows(first_row, rows), lm_head(), out, rows,
                      config.d_model, config.vocab_size, stream);
}

CudaEngine::CudaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaEngine::~CudaEngine() = default;

bool cuda_device_available() { return cuda::device_available(); }

std::unique_ptr<CudaEngine> CudaEngine::from_weights(const ModelWeights& weights) {
  auto impl = std::make_unique<Impl>();
  impl->config = weights.config;
  impl->pairing = weights.config.rope_interleaved_pairs ? kernels::RopePairing::kInterleavedPairs
                                                        : kernels::RopePairing::kHalves;
  impl->init_runtime();
  try {
    impl->embedding = upload_bf16(weights.token_embedding, "embedding");
    impl->output_norm = upload_bf16(weights.output_norm, "output norm");
    impl->tied = weights.output.empty();
    if (!impl->tied) impl->output = upload_bf16(weights.output, "lm head");
    for (const LayerWeights& lw : weights.layers) {
      CudaLayer layer;
      layer.attn_norm = upload_bf16(lw.attn_norm, "attn norm");
      layer.wqkv = concat_matrices_bf16({&lw.wq, &lw.wk, &lw.wv}, "wqkv");
      if (!lw.bq.empty()) layer.bqkv = concat_bf16({&lw.bq, &lw.bk, &lw.bv}, "qkv bias");
      layer.wo = upload_bf16(lw.wo, "wo");
      layer.ffn_norm = upload_bf16(lw.ffn_norm, "ffn norm");
      layer.w_gate_up = concat_matrices_bf16({&lw.w_gate, &lw.w_up}, "gate/up");
      layer.w_down = upload_bf16(lw.w_down, "down");
      impl->layers.push_back(std::move(layer));
    }
  } catch (const cuda::OutOfMemory& e) {
    throw CapacityError(std::string("model weights do not fit on the GPU: ") + e.what());
  }
  impl->weight_bytes =
      static_cast<int64_t>(cuda::device_bytes_in_use()) -
      static_cast<int64_t>(impl->cublas_workspace.bytes() + impl->inv_freq.bytes());
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

std::unique_ptr<CudaEngine> CudaEngine::from_source(const WeightSource& source) {
  auto impl = std::make_unique<Impl>();
  impl->config = source.config();
  impl->pairing = kernels::RopePairing::kHalves;  // every source un-permutes to (i, i + hd/2)
  impl->init_runtime();
  try {
    DeviceWeights w = upload_weights(source, impl->stream);
    impl->embedding = std::move(w.embedding);
    impl->output_norm = std::move(w.output_norm);
    impl->output = std::move(w.output);
    impl->tied = impl->output.data() == nullptr;
    impl->layers = std::move(w.layers);
  } catch (const cuda::OutOfMemory& e) {
    throw CapacityError(source.label() + ": model weights do not fit on the GPU: " + e.what());
  }
  impl->weight_bytes =
      static_cast<int64_t>(cuda::device_bytes_in_use()) -
      static_cast<int64_t>(impl->cublas_workspace.bytes() + impl->inv_freq.bytes());
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

std::unique_ptr<CudaEngine> CudaEngine::from_preset(const ModelConfig& config, uint64_t seed) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->config.dummy_weights = true;
  impl->pairing = config.rope_interleaved_pairs ? kernels::RopePairing::kInterleavedPairs
                                                : kernels::RopePairing::kHalves;
  impl->init_runtime();
  const int64_t d = config.d_model, f = config.ffn_dim;
  const int64_t qd = int64_t(config.n_query_heads) * config.head_dim;
  const int64_t qkv = int64_t(config.n_query_heads + 2 * config.n_kv_heads) * config.head_dim;
  uint64_t stream_id = seed * 1000;
  auto random = [&](int64_t count, float scale, const char* label) {
    DeviceBuffer buffer(count * 2, label);
    cuda::fill_random_bf16(buffer.as<bf16>(), count, ++stream_id, scale, impl->stream);
    return buffer;
  };
  auto ones = [&](int64_t count, const char* label) {
    return upload_bf16(std::vector<float>(count, 1.0f), label);
  };
  try {
    // Scales keep activations O(1) through the random network (uniform(-a, a) has var a^2/3).
    impl->embedding = random(int64_t(config.vocab_size) * d, 1.0f, "embedding");
    impl->output_norm = ones(d, "output norm");
    impl->tied = config.tied_embeddings;
    if (!impl->tied)
      impl->output = random(int64_t(config.vocab_size) * d, std::sqrt(3.0f / d), "lm head");
    for (int l = 0; l < config.n_layers; ++l) {
      CudaLayer layer;
      layer.attn_norm = ones(d, "attn norm");
      layer.wqkv = random(qkv * d, std::sqrt(3.0f / d), "wqkv");
      if (config.qkv_bias) layer.bqkv = random(qkv, 0.1f, "qkv bias");
      layer.wo = random(d * qd, std::sqrt(3.0f / qd), "wo");
      layer.ffn_norm = ones(d, "ffn norm");
      layer.w_gate_up = random(2 * f * d, std::sqrt(3.0f / d), "gate/up");
      layer.w_down = random(d * f, std::sqrt(3.0f / f), "down");
      impl->layers.push_back(std::move(layer));
    }
  } catch (const cuda::OutOfMemory& e) {
    throw CapacityError(std::string("preset ") + config.name +
                        " does not fit on the GPU: " + e.what());
  }
  cuda::check(cudaStreamSynchronize(impl->stream), "preset init");
  impl->weight_bytes =
      static_cast<int64_t>(cuda::device_bytes_in_use()) -
      static_cast<int64_t>(impl->cublas_workspace.bytes() + impl->inv_freq.bytes());
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

const ModelConfig& CudaEngine::config() const { return impl_->config; }
int64_t CudaEngine::weight_bytes() const { return impl_->weight_bytes; }
int CudaEngine::batch() const { return impl_->batch; }
int CudaEngine::capacity() const { return impl_->capacity; }

void CudaEngine::allocate_cache(int batch, int capacity) {
  Impl& m = *impl_;
  m.drop_graph();
  m.decode_graphs.clear();  // their length bounds belong to the old capacity
  m.sparse.reset();
  m.eviction.reset();
  m.k_cache.clear();
  m.v_cache.clear();
  m.decode_workspace = DeviceBuffer();
  const ModelConfig& c = m.config;
  m.batch = batch;
  m.capacity = capacity;
  const int hkv = batch * c.n_kv_heads;
  const int64_t per_layer = int64_t(hkv) * capacity * c.head_dim * 2;
  try {
    for (int l = 0; l < c.n_layers; ++l) {
      m.k_cache.emplace_back(per_layer, "K cache");
      m.v_cache.emplace_back(per_layer, "V cache");
    }
    m.host_offset.resize(int64_t(c.n_layers) * hkv);
    for (int l = 0; l < c.n_layers; ++l)
      for (int i = 0; i < hkv; ++i) m.host_offset[int64_t(l) * hkv + i] = int64_t(i) * capacity;
    m.host_length.assign(int64_t(c.n_layers) * hkv, 0);
    m.host_position.assign(batch, 0);
    m.kv_offset = DeviceBuffer(m.host_offset.size() * 8, "KV offsets");
    m.kv_offset.upload(m.host_offset.data(), m.host_offset.size() * 8);
    m.kv_length = DeviceBuffer(m.host_length.size() * 4, "KV lengths");
    m.kv_length.upload(m.host_length.data(), m.host_length.size() * 4);
    m.tokens = DeviceBuffer(batch * 4, "tokens");
    m.positions = DeviceBuffer(batch * 4, "positions");
    m.logits = DeviceBuffer(int64_t(batch) * c.vocab_size * 4, "logits");
    m.decode_workspace = DeviceBuffer(std::max(cuda::decode_attention_workspace_floats(
                                                   batch, c.n_query_heads, c.head_dim, capacity),
                                               cuda::early_exit_decode_workspace_floats(
                                                   batch, c.n_query_heads, c.head_dim, capacity)) *
                                          4,
                                      "decode workspace");
    m.argmax_keys = DeviceBuffer(size_t(batch) * 8, "argmax keys");
    cuda::check(cudaMemsetAsync(m.argmax_keys.data(), 0, m.argmax_keys.bytes(), m.stream),
                "memset");
    // The ART walk's state words are zeroed once here; every walk leaves them clean.
    m.walker_state = DeviceBuffer(size_t(hkv) * cuda::kStateWords * 4, "ART walk state");
    cuda::check(cudaMemsetAsync(m.walker_state.data(), 0, m.walker_state.bytes(), m.stream),
                "memset");
    if (!m.walk_counts.data()) {
      m.walk_counts = DeviceBuffer(3 * sizeof(unsigned long long), "ART walk counts");
      cuda::check(cudaMemsetAsync(m.walk_counts.data(), 0, m.walk_counts.bytes(), m.stream),
                  "memset");
    }
    m.ensure_activations(batch);
  } catch (const cuda::OutOfMemory& e) {
    m.k_cache.clear();
    m.v_cache.clear();
    throw CapacityError("batch " + std::to_string(batch) + " x context " +
                        std::to_string(capacity) + " does not fit on the GPU (" + e.what() +
                        "); use a smaller --batch, a " + "shorter --context or a smaller --budget");
  }
}

std::vector<float> CudaEngine::prefill(int seq, const std::vector<int32_t>& ids, int chunk_tokens) {
  PrefillCapture unused;
  return prefill_with_captures(seq, ids, CaptureRequest{}, unused, chunk_tokens);
}

std::vector<float> CudaEngine::prefill_with_captures(int seq, const std::vector<int32_t>& ids,
                                                     const CaptureRequest& request,
                                                     PrefillCapture& capture, int chunk_tokens) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  if (seq < 0 || seq >= m.batch) throw InputError("prefill: sequence index out of range");
  const int hkv = m.heads_total();
  const int start_length = m.host_length[int64_t(seq) * c.n_kv_heads];
  m.forget_stale_selection();
  m.fit_memo.forget();  // fits are shared by the cells of one prefill only
  if (start_length + int64_t(ids.size()) > m.capacity)
    throw CapacityError("prefill of " + std::to_string(ids.size()) + " tokens exceeds the cache " +
                        "capacity " + std::to_string(m.capacity));
  const int total = static_cast<int>(ids.size());
  const int chunk =
      prefill_chunk_size(total, std::min(chunk_tokens, m.prefill_rows_within_activation_budget()));
  try {
    m.ensure_activations(chunk);
  } catch (const cuda::OutOfMemory& e) {
    throw CapacityError("prefill chunk of " + std::to_string(chunk) +
                        " tokens does not fit: " + e.what());
  }
  DeviceBuffer chunk_ids(chunk * 4, "ids"), chunk_positions(chunk * 4, "positions");
  DeviceBuffer last_logits(int64_t(c.vocab_size) * 4, "logits");
  PrefillStatistics statistics(c, request, total, chunk, start_length, m.stream, m.cublas);
  // CaptureRequest::layer_inputs: the residual rows entering each layer, copied out as they pass.
  std::vector<std::vector<float>> layer_inputs(request.layer_inputs ? c.n_layers : 0);
  for (std::vector<float>& rows : layer_inputs) rows.resize(size_t(total) * c.d_model);
  for (int begin = 0; begin < total; begin += chunk) {
    const int n = std::min(chunk, total - begin);
    const int offset = m.host_position[seq];
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = offset + i;
    cuda::check(cudaMemcpyAsync(chunk_ids.data(), ids.data() + begin, n * 4, cudaMemcpyHostToDevice,
                                m.stream),
                "ids upload");
    cuda::check(cudaMemcpyAsync(chunk_positions.data(), pos.data(), n * 4, cudaMemcpyHostToDevice,
                                m.stream),
                "positions upload");
    cuda::embedding_gather(ptr<bf16>(m.embedding), chunk_ids.as<int32_t>(), n, c.d_model,
                           ptr<float>(m.residual), m.stream);
    float* lse = statistics.lse_for_chunk(begin, n);
    m.run_layers(n, chunk_positions.as<int32_t>(), false, [&](int l, const cuda::RopeArgs&) {
      if (!layer_inputs.empty())  // the residual holds layer l's input until its o product adds
        cuda::check(cudaMemcpyAsync(layer_inputs[l].data() + int64_t(begin) * c.d_model,
                                    m.residual.data(), int64_t(n) * c.d_model * sizeof(float),
                                    cudaMemcpyDeviceToHost, m.stream),
                    "layer inputs download");
      const int64_t* offsets =
          ptr<int64_t>(m.kv_offset) + int64_t(l) * hkv + int64_t(seq) * c.n_kv_heads;
      int32_t* lengths = ptr<int32_t>(m.kv_length) + int64_t(l) * hkv + int64_t(seq) * c.n_kv_heads;
      cuda::append_kv(ptr<bf16>(m.qkv), n, n, c.n_query_heads, c.n_kv_heads, c.head_dim, offsets,
                      lengths, ptr<bf16>(m.k_cache[l]), ptr<bf16>(m.v_cache[l]), m.stream);
      cuda::advance_lengths(lengths, c.n_kv_heads, nullptr, 0, n, m.stream);
      cuda::PrefillAttentionArgs a;
      a.q = ptr<bf16>(m.qkv);  // rotated already (apply_rope ran before this)
      a.q_row_stride = m.qkv_width();
      const int64_t first_row = m.host_offset[int64_t(l) * hkv + int64_t(seq) * c.n_kv_heads];
      a.k = ptr<bf16>(m.k_cache[l]) + first_row * c.head_dim;
      a.v = ptr<bf16>(m.v_cache[l]) + first_row * c.head_dim;
      a.kv_head_stride = int64_t(m.capacity) * c.head_dim;
      a.out = ptr<bf16>(m.attn_out);
      a.out_row_stride = int64_t(c.n_query_heads) * c.head_dim;
      a.n_queries = n;
      a.query_offset = offset;
      a.n_query_heads = c.n_query_heads;
      a.n_kv_heads = c.n_kv_heads;
      a.head_dim = c.head_dim;
      a.scale = 1.f / std::sqrt(float(c.head_dim));
      a.lse = lse;
      cuda::prefill_attention(a, m.stream);
      statistics.after_attention({l, begin, n, a.q, a.q_row_stride, a.out, lse, a.k, a.v,
                                  a.kv_head_stride, ptr<bf16>(m.layers[l].wo)});
    });
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        m.host_length[int64_t(l) * hkv + seq * c.n_kv_heads + h] += n;
    m.host_position[seq] += n;
    if (begin + n == total) m.logits_for_rows(n - 1, 1, last_logits.as<float>());
  }
  std::vector<float> out(c.vocab_size);
  cuda::check(cudaMemcpyAsync(out.data(), last_logits.data(), out.size() * 4,
                              cudaMemcpyDeviceToHost, m.stream),
              "logits download");
  cuda::check(cudaStreamSynchronize(m.stream), "prefill");
  capture = PrefillCapture{};
  statistics.download(capture);
  capture.layer_inputs = std::move(layer_inputs);
  return out;
}

void CudaEngine::copy_sequence(int from, int to) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  if (from < 0 || from >= m.batch || to < 0 || to >= m.batch)
    throw InputError("copy_sequence: sequence index out of range");
  if (from == to) return;
  m.forget_stale_selection();
  const int hkv = m.heads_total();
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const int64_t src = int64_t(l) * hkv + int64_t(from) * c.n_kv_heads + h;
      const int64_t dst = int64_t(l) * hkv + int64_t(to) * c.n_kv_heads + h;
      const size_t bytes = size_t(m.host_length[src]) * c.head_dim * 2;
      for (auto* cache : {&m.k_cache[l], &m.v_cache[l]})
        cuda::check(cudaMemcpyAsync(cache->as<bf16>() + m.host_offset[dst] * c.head_dim,
                                    cache->as<bf16>() + m.host_offset[src] * c.head_dim, bytes,
                                    cudaMemcpyDeviceToDevice, m.stream),
                    "copy_sequence");
      m.host_length[dst] = m.host_length[src];
    }
  m.host_position[to] = m.host_position[from];
  m.kv_length.upload(m.host_length.data(), m.host_length.size() * 4);
  cuda::check(cudaStreamSynchronize(m.stream), "copy_sequence");
}

int CudaEngine::max_batch(int capacity) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.config;
  size_t free_bytes = 0, total_bytes = 0;
  cuda::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  int64_t cache_now = 0;
  for (const auto& buffer : m.k_cache) cache_now += 2 * int64_t(buffer.bytes());
  cache_now += int64_t(m.decode_workspace.bytes());
  const int64_t per_sequence =
      int64_t(c.n_layers) * c.n_kv_heads * capacity * c.head_dim * 2 * 2 +
      int64_t(std::max(
          cuda::decode_attention_workspace_floats(1, c.n_query_heads, c.head_dim, capacity),
          cuda::early_exit_decode_workspace_floats(1, c.n_query_heads, c.head_dim, capacity))) *
          4 +
      int64_t(c.vocab_size) * 4;
  // Headroom: prefill activations and cuBLAS workspaces grow with the chunk, not the batch.
  const int64_t headroom = (int64_t(1) << 30) + int64_t(total_bytes) / 20;
  const int64_t usable = int64_t(free_bytes) + cache_now - headroom;
  return static_cast<int>(std::max<int64_t>(0, usable / std::max<int64_t>(per_sequence, 1)));
}

std::vector<float> CudaEngine::output_projection(int layer) const {
  const Impl& m = *impl_;
  const CudaLayer& w = m.layers.at(layer);
  std::vector<uint16_t> bits(w.wo.bytes() / 2);
  cuda::check(cudaMemcpy(bits.data(), w.wo.data(), w.wo.bytes(), cudaMemcpyDeviceToHost),
              "W_o download");
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

int CudaEngine::next_position(int seq) const { return impl_->host_position.at(seq); }

std::vector<float> CudaEngine::cached_sequence(int layer, int seq, bool values) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.config;
  // The sequence's heads are consecutive regions of `capacity` rows: one download for all.
  const int64_t first =
      m.host_offset[int64_t(layer) * m.heads_total() + int64_t(seq) * c.n_kv_heads];
  return m.download_rows((values ? m.v_cache : m.k_cache)[layer], first,
                         int64_t(c.n_kv_heads) * m.capacity);
}

void CudaEngine::compact(int seq, const KeptIndices& kept) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  const int hkv = m.heads_total();
  SequenceHeads heads;
  heads.head_offset = m.host_offset.data();
  heads.head_length = m.host_length.data();
  heads.slots_per_layer = hkv;
  heads.first_slot = int64_t(seq) * c.n_kv_heads;
  heads.n_layers = c.n_layers;
  heads.n_kv_heads = c.n_kv_heads;
  CompactionRows& lists = m.compaction_rows;  // reused: its arrays keep their pages between calls
  build_compaction_rows(kept, heads, lists);  // checks every list before anything moves
  m.forget_stale_selection();
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h)
      m.host_length[int64_t(l) * hkv + heads.first_slot + h] =
          static_cast<int32_t>(kept[l][h].size());
  // Gather kept rows into scratch, then write them back packed at the head's first rows. The row
  // lists of every layer go up in one copy on the stream and the kernels queue behind it without a
  // wait between layers: a compaction costs one upload and one synchronisation.
  if (lists.widest > 0) {
    const size_t row_bytes = lists.rows.size() * sizeof(int64_t);
    DeviceBuffer d_rows(row_bytes, "compact rows");
    // From pageable memory the call returns once the rows are staged, so `lists` may be refilled
    // next call; on the engine's stream the copies below see them.
    cuda::check(cudaMemcpyAsync(d_rows.data(), lists.rows.data(), row_bytes, cudaMemcpyHostToDevice,
                                m.stream),
                "compact rows upload");
    const int64_t* scratch_index = d_rows.as<int64_t>() + (lists.rows.size() - lists.widest);
    DeviceBuffer scratch(lists.widest * c.head_dim * 2, "compact scratch");
    for (int l = 0; l < c.n_layers; ++l) {
      const int64_t n = lists.layer_count[l];
      if (n == 0) continue;
      const int64_t* src = d_rows.as<int64_t>() + lists.layer_start[l];
      const int64_t* dst = src + n;
      for (auto* cache : {&m.k_cache[l], &m.v_cache[l]}) {
        cuda::copy_rows(cache->as<bf16>(), scratch.as<bf16>(), src, scratch_index, n, c.head_dim,
                        m.stream);
        cuda::copy_rows(scratch.as<bf16>(), cache->as<bf16>(), scratch_index, dst, n, c.head_dim,
                        m.stream);
      }
    }
    cuda::check(cudaStreamSynchronize(m.stream), "compact");
  }
  m.kv_length.upload(m.host_length.data(), m.host_length.size() * 4);
}

void CudaEngine::fill_cache_random(int length, uint64_t seed) {
  Impl& m = *impl_;
  if (length > m.capacity) throw CapacityError("fill_cache_random: length exceeds capacity");
  m.forget_stale_selection();
  const ModelConfig& c = m.config;
  for (int l = 0; l < c.n_layers; ++l) {
    const size_t count = m.k_cache[l].bytes() / 2;
    cuda::fill_random_bf16(m.k_cache[l].as<bf16>(), count, seed * 7919 + 2 * l, 1.0f, m.stream);
    cuda::fill_random_bf16(m.v_cache[l].as<bf16>(), count, seed * 7919 + 2 * l + 1, 1.0f, m.stream);
  }
  std::fill(m.host_length.begin(), m.host_length.end(), length);
  std::fill(m.host_position.begin(), m.host_position.end(), length);
  m.kv_length.upload(m.host_length.data(), m.host_length.size() * 4);
  cuda::check(cudaStreamSynchronize(m.stream), "fill_cache_random");
}

std::vector<float> CudaEngine::cached_keys(int layer, int seq, int head) const {
  const Impl& m = *impl_;
  const int64_t slot = int64_t(layer) * m.heads_total() + int64_t(seq) * m.config.n_kv_heads + head;
  return m.download_rows(m.k_cache[layer], m.host_offset[slot], m.host_length[slot]);
}

std::vector<float> CudaEngine::Impl::download_rows(const DeviceBuffer& buffer, int64_t first_row,
                                                   int64_t rows) const {
  const int64_t n = rows * config.head_dim;
  std::vector<bf16> bits(n);
  cuda::check(cudaStreamSynchronize(stream), "sync");
  buffer.download(bits.data(), n * 2, first_row * config.head_dim * 2);
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = __bfloat162float(bits[i]);
  return out;
}

int64_t CudaEngine::kv_bytes() const {
  int64_t entries = 0;
  for (int32_t length : impl_->host_length) entries += length;
  return entries * 2 * impl_->config.head_dim * 2;
}

int64_t CudaEngine::kv_allocated_bytes() const {
  int64_t total = 0;
  for (const auto& buffer : impl_->k_cache) total += buffer.bytes();
  return 2 * total;
}

int CudaEngine::length(int layer, int seq, int head) const {
  return impl_
      ->host_length[int64_t(layer) * impl_->heads_total() + seq * impl_->config.n_kv_heads + head];
}

int64_t CudaEngine::device_bytes() const { return int64_t(cuda::device_bytes_in_use()); }
int64_t CudaEngine::device_peak_bytes() const { return int64_t(cuda::device_bytes_peak()); }
void CudaEngine::reset_peak_bytes() { cuda::reset_device_peak(); }

void CudaEngine::synchronize() const { cuda::check(cudaStreamSynchronize(impl_->stream), "sync"); }

}  // namespace kvb
