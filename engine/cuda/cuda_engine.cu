#include "engine/cuda/cuda_engine.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/cuda/cuda_sparse_decode.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/prefill_statistics.h"
#include "engine/errors.h"
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

struct CudaEngine::Impl {
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
  std::vector<int32_t> host_position;          // next position per sequence

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
  int sparse_capture_key = 0;                              // its step key the graph was captured at
  // Upper bound on every KV length during the captured decode steps (decode_length_bound_for).
  int decode_length_bound = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;

  ~Impl() {
    if (graph_exec) cudaGraphExecDestroy(graph_exec);
    if (graph) cudaGraphDestroy(graph);
    if (cublas) cublasDestroy(cublas);
    if (stream) cudaStreamDestroy(stream);
  }

  int qkv_width() const { return (config.n_query_heads + 2 * config.n_kv_heads) * config.head_dim; }
  int heads_total() const { return batch * config.n_kv_heads; }

  void init_runtime() {
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

  void ensure_activations(int rows) {
    if (rows <= activation_rows) return;
    const int64_t d = config.d_model;
    residual = DeviceBuffer(rows * d * 4, "activations");
    normed = DeviceBuffer(rows * d * 2, "activations");
    qkv = DeviceBuffer(int64_t(rows) * qkv_width() * 2, "activations");
    attn_out = DeviceBuffer(int64_t(rows) * config.n_query_heads * config.head_dim * 2, "activations");
    gate_up = DeviceBuffer(int64_t(rows) * 2 * config.ffn_dim * 2, "activations");
    act = DeviceBuffer(int64_t(rows) * config.ffn_dim * 2, "activations");
    ffn_out = DeviceBuffer(rows * d * 2, "activations");
    norm_sums = DeviceBuffer(cuda::kFoldedNormSumsDoubles * sizeof(double), "activations");
    activation_rows = rows;
    drop_graph();
  }

  // Decode selection's metadata (codes, pages) describes the cache it started on: once the cache is
  // rewritten it goes, and with it the graph that captured its kernels.
  void forget_stale_selection() {
    if (!sparse) return;
    sparse.reset();
    drop_graph();
  }

  // The decode kernels cut the KV range into splits by an upper bound on the lengths; the capacity
  // would make a compressed cache's few entries one long split per head (SnapKV 5% of 32K at batch
  // 1: TPOT as slow as Full's). The bound is the longest length plus headroom for the coming steps,
  // so a captured graph serves them until the lengths outgrow it.
  int decode_length_bound_for(int longest) const {
    const int headroom = std::max(256, longest / 8);
    return std::min(capacity, (longest + headroom + 63) / 64 * 64);
  }

  // Re-bounds the decode step (and drops its graph) when this step's lengths outgrow the bound, or
  // when a compaction left them far below it.
  void fit_decode_length_bound(int longest) {
    const int wanted = decode_length_bound_for(longest);
    if (longest <= decode_length_bound && wanted * 2 > decode_length_bound) return;
    decode_length_bound = wanted;
    drop_graph();
  }

  void drop_graph() {
    if (graph_exec) cudaGraphExecDestroy(graph_exec);
    if (graph) cudaGraphDestroy(graph);
    graph_exec = nullptr;
    graph = nullptr;
  }

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
        cuda::gemm_bf16(folded_norm(w.attn_norm, 0), ptr<bf16>(w.wqkv), ptr<bf16>(qkv), rows, d,
                        qkv_width(), stream);
      } else {
        cuda::add_rmsnorm(ptr<float>(residual), l == 0 ? nullptr : ptr<bf16>(ffn_out),
                          ptr<bf16>(w.attn_norm), rows, d, eps, ptr<bf16>(normed), stream);
        cuda::gemm_bf16(cublas, ptr<bf16>(normed), ptr<bf16>(w.wqkv), ptr<bf16>(qkv), rows, d,
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
      if (!attention_applies_rope) cuda::bias_rope(rope, stream);
      attention(l, rope);
      if (norms_folded) {
        const DeviceBuffer& next_gain =
            l + 1 < config.n_layers ? layers[l + 1].attn_norm : output_norm;
        const cuda::FoldedNorm ffn_norm = folded_norm(w.ffn_norm, 1);
        cuda::gemm_bf16_into_residual(ptr<bf16>(attn_out), ptr<bf16>(w.wo), ptr<float>(residual),
                                      rows, attn_width, d, ffn_norm, stream);
        cuda::gate_up_swiglu(ffn_norm, ptr<bf16>(w.w_gate_up), ptr<bf16>(act), rows, d,
                             config.ffn_dim, stream);
        cuda::gemm_bf16_into_residual(ptr<bf16>(act), ptr<bf16>(w.w_down), ptr<float>(residual),
                                      rows, config.ffn_dim, d, folded_norm(next_gain, 0), stream);
      } else {
        cuda::gemm_bf16(cublas, ptr<bf16>(attn_out), ptr<bf16>(w.wo), ptr<bf16>(ffn_out), rows,
                        attn_width, d, stream);
        cuda::add_rmsnorm(ptr<float>(residual), ptr<bf16>(ffn_out), ptr<bf16>(w.ffn_norm), rows, d,
                          eps, ptr<bf16>(normed), stream);
        cuda::gate_up_swiglu(cublas, ptr<bf16>(normed), ptr<bf16>(w.w_gate_up), ptr<bf16>(gate_up),
                             ptr<bf16>(act), rows, d, config.ffn_dim, stream);
        cuda::gemm_bf16(cublas, ptr<bf16>(act), ptr<bf16>(w.w_down), ptr<bf16>(ffn_out), rows,
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

  // Final norm of the given rows (they must be contiguous in `residual`) and the LM head.
  void logits_for_rows(int first_row, int rows, float* out) {
    const int d = config.d_model;
    bf16* norm_out = ptr<bf16>(normed) + int64_t(first_row) * d;
    cuda::add_rmsnorm(ptr<float>(residual) + int64_t(first_row) * d,
                      norms_folded ? nullptr : ptr<bf16>(ffn_out) + int64_t(first_row) * d,
                      ptr<bf16>(output_norm), rows, d, config.rms_norm_eps, norm_out, stream);
    cuda::gemm_bf16_f32out(cublas, norm_out, lm_head(), out, rows, d, config.vocab_size, stream);
  }

  void decode_graph_body() {
    const int d = config.d_model;
    const int hkv = heads_total();
    cuda::embedding_gather(ptr<bf16>(embedding), ptr<int32_t>(tokens), batch, d, ptr<float>(residual),
                           stream);
    run_layers(batch, ptr<int32_t>(positions), true, [&](int l, const cuda::RopeArgs& rope) {
      const int64_t* offsets = ptr<int64_t>(kv_offset) + int64_t(l) * hkv;
      int32_t* lengths = ptr<int32_t>(kv_length) + int64_t(l) * hkv;
      cuda::DecodeAttentionArgs a;
      a.q = ptr<bf16>(qkv);
      a.q_seq_stride = qkv_width();
      a.k = ptr<bf16>(k_cache[l]);
      a.v = ptr<bf16>(v_cache[l]);
      a.kv_offset = offsets;
      a.kv_length = lengths;
      a.max_kv_length = decode_length_bound;
      a.out = ptr<bf16>(attn_out);
      a.out_seq_stride = config.n_query_heads * config.head_dim;
      a.batch = batch;
      a.n_query_heads = config.n_query_heads;
      a.n_kv_heads = config.n_kv_heads;
      a.head_dim = config.head_dim;
      a.scale = 1.f / std::sqrt(float(config.head_dim));
      a.workspace = ptr<float>(decode_workspace);
      if (sparse && sparse->selects(l)) {  // the index-list path appends in a kernel of its own
        cuda::rope_append_kv_decode(rope, offsets, lengths, ptr<bf16>(k_cache[l]),
                                    ptr<bf16>(v_cache[l]), stream);
        sparse->attend(l, a, stream);
        return;
      }
      // The dense kernel and the ART walk append the step's token themselves (one boundary fewer).
      a.append = cuda::decode_append_for(rope, ptr<bf16>(k_cache[l]), ptr<bf16>(v_cache[l]), lengths);
      if (early_exit) {
        cuda::EarlyExitDecodeArgs walk;
        walk.attention = a;
        walk.options = *early_exit;
        walk.walker_state = ptr<int32_t>(walker_state);
        walk.totals = ptr<unsigned long long>(walk_counts);
        cuda::early_exit_decode(walk, stream);
      } else {
        cuda::decode_attention(a, stream);
      }
    });
    if (norms_folded) {
      cuda::lm_head_argmax(folded_norm(output_norm, 0), lm_head(), ptr<float>(logits), batch, d,
                           config.vocab_size, ptr<unsigned long long>(argmax_keys),
                           ptr<int32_t>(tokens), stream);
    } else {
      cuda::add_rmsnorm(ptr<float>(residual), ptr<bf16>(ffn_out), ptr<bf16>(output_norm), batch, d,
                        config.rms_norm_eps, ptr<bf16>(normed), stream);
      cuda::lm_head_argmax(cublas, ptr<bf16>(normed), lm_head(), ptr<float>(logits), batch, d,
                           config.vocab_size, ptr<unsigned long long>(argmax_keys),
                           ptr<int32_t>(tokens), stream);
    }
    cuda::advance_lengths(nullptr, 0, ptr<int32_t>(positions), batch, 1, stream);
  }
};

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
  impl->weight_bytes = static_cast<int64_t>(cuda::device_bytes_in_use()) -
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
  impl->weight_bytes = static_cast<int64_t>(cuda::device_bytes_in_use()) -
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
    if (!impl->tied) impl->output = random(int64_t(config.vocab_size) * d, std::sqrt(3.0f / d), "lm head");
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
    throw CapacityError(std::string("preset ") + config.name + " does not fit on the GPU: " + e.what());
  }
  cuda::check(cudaStreamSynchronize(impl->stream), "preset init");
  impl->weight_bytes = static_cast<int64_t>(cuda::device_bytes_in_use()) -
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
  m.sparse.reset();
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
    m.decode_workspace = DeviceBuffer(
        std::max(cuda::decode_attention_workspace_floats(batch, c.n_query_heads, c.head_dim, capacity),
                 cuda::early_exit_decode_workspace_floats(batch, c.n_query_heads, c.head_dim, capacity)) *
            4,
        "decode workspace");
    m.argmax_keys = DeviceBuffer(size_t(batch) * 8, "argmax keys");
    cuda::check(cudaMemsetAsync(m.argmax_keys.data(), 0, m.argmax_keys.bytes(), m.stream),
                "memset");
    // The ART walk's state words are zeroed once here; every walk leaves them clean.
    m.walker_state = DeviceBuffer(size_t(hkv) * cuda::kStateWords * 4, "ART walk state");
    cuda::check(cudaMemsetAsync(m.walker_state.data(), 0, m.walker_state.bytes(), m.stream), "memset");
    if (!m.walk_counts.data()) {
      m.walk_counts = DeviceBuffer(3 * sizeof(unsigned long long), "ART walk counts");
      cuda::check(cudaMemsetAsync(m.walk_counts.data(), 0, m.walk_counts.bytes(), m.stream), "memset");
    }
    m.ensure_activations(batch);
  } catch (const cuda::OutOfMemory& e) {
    m.k_cache.clear();
    m.v_cache.clear();
    throw CapacityError("batch " + std::to_string(batch) + " x context " + std::to_string(capacity) +
                        " does not fit on the GPU (" + e.what() + "); use a smaller --batch, a " +
                        "shorter --context or a smaller --budget");
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
  if (start_length + int64_t(ids.size()) > m.capacity)
    throw CapacityError("prefill of " + std::to_string(ids.size()) + " tokens exceeds the cache " +
                        "capacity " + std::to_string(m.capacity));
  const int total = static_cast<int>(ids.size());
  const int chunk =
      prefill_chunk_size(total, std::min(chunk_tokens, m.prefill_rows_within_activation_budget()));
  try {
    m.ensure_activations(chunk);
  } catch (const cuda::OutOfMemory& e) {
    throw CapacityError("prefill chunk of " + std::to_string(chunk) + " tokens does not fit: " + e.what());
  }
  DeviceBuffer chunk_ids(chunk * 4, "ids"), chunk_positions(chunk * 4, "positions");
  DeviceBuffer last_logits(int64_t(c.vocab_size) * 4, "logits");
  PrefillStatistics statistics(c, request, total, chunk, start_length, m.stream, m.cublas);
  for (int begin = 0; begin < total; begin += chunk) {
    const int n = std::min(chunk, total - begin);
    const int offset = m.host_position[seq];
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = offset + i;
    cuda::check(cudaMemcpyAsync(chunk_ids.data(), ids.data() + begin, n * 4, cudaMemcpyHostToDevice,
                                m.stream), "ids upload");
    cuda::check(cudaMemcpyAsync(chunk_positions.data(), pos.data(), n * 4, cudaMemcpyHostToDevice,
                                m.stream), "positions upload");
    cuda::embedding_gather(ptr<bf16>(m.embedding), chunk_ids.as<int32_t>(), n, c.d_model,
                           ptr<float>(m.residual), m.stream);
    float* lse = statistics.lse_for_chunk(begin, n);
    m.run_layers(n, chunk_positions.as<int32_t>(), false, [&](int l, const cuda::RopeArgs&) {
      const int64_t* offsets = ptr<int64_t>(m.kv_offset) + int64_t(l) * hkv + int64_t(seq) * c.n_kv_heads;
      int32_t* lengths = ptr<int32_t>(m.kv_length) + int64_t(l) * hkv + int64_t(seq) * c.n_kv_heads;
      cuda::append_kv(ptr<bf16>(m.qkv), n, n, c.n_query_heads, c.n_kv_heads, c.head_dim, offsets,
                      lengths, ptr<bf16>(m.k_cache[l]), ptr<bf16>(m.v_cache[l]), m.stream);
      cuda::advance_lengths(lengths, c.n_kv_heads, nullptr, 0, n, m.stream);
      cuda::PrefillAttentionArgs a;
      a.q = ptr<bf16>(m.qkv);  // rotated already (bias_rope ran before this)
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
      cuda::flash_attention_prefill(a, m.stream);
      statistics.after_attention({l, begin, n, a.q, a.q_row_stride, a.out, lse, a.k, a.v,
                                  a.kv_head_stride, ptr<bf16>(m.layers[l].wo)});
    });
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) m.host_length[int64_t(l) * hkv + seq * c.n_kv_heads + h] += n;
    m.host_position[seq] += n;
    if (begin + n == total) m.logits_for_rows(n - 1, 1, last_logits.as<float>());
  }
  std::vector<float> out(c.vocab_size);
  cuda::check(cudaMemcpyAsync(out.data(), last_logits.data(), out.size() * 4, cudaMemcpyDeviceToHost,
                              m.stream), "logits download");
  cuda::check(cudaStreamSynchronize(m.stream), "prefill");
  capture = PrefillCapture{};
  statistics.download(capture);
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
      int64_t(std::max(cuda::decode_attention_workspace_floats(1, c.n_query_heads, c.head_dim, capacity),
                       cuda::early_exit_decode_workspace_floats(1, c.n_query_heads, c.head_dim, capacity))) * 4 +
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
  const int64_t first = m.host_offset[int64_t(layer) * m.heads_total() + int64_t(seq) * c.n_kv_heads];
  return m.download_rows((values ? m.v_cache : m.k_cache)[layer], first,
                         int64_t(c.n_kv_heads) * m.capacity);
}

void CudaEngine::compact(int seq, const KeptIndices& kept) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  const int hkv = m.heads_total();
  if (static_cast<int>(kept.size()) != c.n_layers)
    throw InputError("compact: kept indices must cover every layer");
  m.forget_stale_selection();
  // Gather kept rows into scratch, then write them back packed at the head's first rows. The row
  // lists of every layer go up in one buffer and the kernels queue without a wait between layers:
  // a compaction costs one upload and one synchronisation, not two per layer.
  std::vector<int64_t> rows;  // per layer: src rows, then dst rows
  std::vector<int64_t> layer_start(c.n_layers + 1, 0), layer_count(c.n_layers, 0);
  int64_t widest = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<int64_t> src_rows, dst_rows;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const int64_t slot = int64_t(l) * hkv + int64_t(seq) * c.n_kv_heads + h;
      const auto& idx = kept[l][h];
      for (size_t i = 0; i < idx.size(); ++i) {
        if (idx[i] < 0 || idx[i] >= m.host_length[slot] || (i && idx[i] <= idx[i - 1]))
          throw InputError("compact: kept indices of layer " + std::to_string(l) + " head " +
                           std::to_string(h) + " must be strictly increasing live entries");
        src_rows.push_back(m.host_offset[slot] + idx[i]);
        dst_rows.push_back(m.host_offset[slot] + int64_t(i));
      }
    }
    layer_count[l] = static_cast<int64_t>(src_rows.size());
    widest = std::max(widest, layer_count[l]);
    layer_start[l] = static_cast<int64_t>(rows.size());
    rows.insert(rows.end(), src_rows.begin(), src_rows.end());
    rows.insert(rows.end(), dst_rows.begin(), dst_rows.end());
  }
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h)
      m.host_length[int64_t(l) * hkv + int64_t(seq) * c.n_kv_heads + h] =
          static_cast<int32_t>(kept[l][h].size());
  if (widest > 0) {
    std::vector<int64_t> scratch_rows(widest);
    for (int64_t i = 0; i < widest; ++i) scratch_rows[i] = i;
    rows.insert(rows.end(), scratch_rows.begin(), scratch_rows.end());
    DeviceBuffer d_rows(rows.size() * 8, "compact rows");
    d_rows.upload(rows.data(), rows.size() * 8);
    const int64_t* scratch_index = d_rows.as<int64_t>() + (rows.size() - widest);
    DeviceBuffer scratch(widest * c.head_dim * 2, "compact scratch");
    for (int l = 0; l < c.n_layers; ++l) {
      const int64_t n = layer_count[l];
      if (n == 0) continue;
      const int64_t* src = d_rows.as<int64_t>() + layer_start[l];
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

void CudaEngine::set_next_tokens(const std::vector<int32_t>& tokens,
                                 const std::vector<int32_t>& positions) {
  Impl& m = *impl_;
  if (static_cast<int>(tokens.size()) != m.batch || static_cast<int>(positions.size()) != m.batch)
    throw InputError("set_next_tokens: one token and one position per sequence expected");
  m.tokens.upload(tokens.data(), tokens.size() * 4);
  m.positions.upload(positions.data(), positions.size() * 4);
  for (int b = 0; b < m.batch; ++b) m.host_position[b] = positions[b];
}

void CudaEngine::decode_step(bool use_graph) {
  Impl& m = *impl_;
  int longest = 0;
  for (int32_t length : m.host_length) {
    if (length + 1 > m.capacity)
      throw CapacityError("decode step would exceed the cache capacity " + std::to_string(m.capacity));
    longest = std::max(longest, length + 1);
  }
  m.fit_decode_length_bound(longest);
  if (m.sparse) {  // a moving step budget is fixed in a captured step: re-capture when it moves
    const int key = m.sparse->prepare_step(m.host_length[0] + 1);
    if (key != m.sparse_capture_key) m.drop_graph();
    m.sparse_capture_key = key;
  }
  if (!use_graph) {
    m.decode_graph_body();
  } else {
    if (!m.graph_exec) {
      cuda::check(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
      m.decode_graph_body();
      cuda::check(cudaStreamEndCapture(m.stream, &m.graph), "end capture");
      cuda::check(cudaGraphInstantiate(&m.graph_exec, m.graph, 0), "graph instantiate");
    }
    cuda::check(cudaGraphLaunch(m.graph_exec, m.stream), "graph launch");
  }
  for (auto& length : m.host_length) ++length;
  for (auto& position : m.host_position) ++position;
}

std::vector<int32_t> CudaEngine::next_tokens() const {
  std::vector<int32_t> out(impl_->batch);
  cuda::check(cudaStreamSynchronize(impl_->stream), "decode");
  impl_->tokens.download(out.data(), out.size() * 4);
  return out;
}

std::vector<float> CudaEngine::last_logits(int seq) const {
  std::vector<float> out(impl_->config.vocab_size);
  cuda::check(cudaStreamSynchronize(impl_->stream), "decode");
  impl_->logits.download(out.data(), out.size() * 4, int64_t(seq) * out.size() * 4);
  return out;
}

void CudaEngine::set_early_exit(const std::optional<EarlyExitParams>& params) {
  Impl& m = *impl_;
  m.drop_graph();
  if (!params) {
    m.early_exit.reset();
    return;
  }
  if (params->block_size != cuda::kEarlyExitBlock)
    throw InputError("ART on the GPU walks blocks of " + std::to_string(cuda::kEarlyExitBlock) +
                     " entries (the kernel's tile); got block_size " + std::to_string(params->block_size));
  if (params->oracle_tolerance > 0)
    throw InputError("ART's oracle mode runs on the CPU engine only; drop oracle_tolerance for the GPU");
  if (params->sink_tokens > cuda::kEarlyExitBlock)
    throw InputError("ART on the GPU supports at most 64 sink tokens; got " +
                     std::to_string(params->sink_tokens));
  cuda::EarlyExitDecodeOptions options;
  options.tau = params->tau;
  options.phi = params->phi;
  options.patience = params->patience;
  options.sink_tokens = params->sink_tokens;
  if (params->per_head)
    throw InputError(
        "ART on the GPU stops a KV group's heads together; drop \"stop\": \"head\" (CPU only)");
  options.scale_criterion = params->scale_criterion == "norm"     ? cuda::EarlyExitScale::kNorm
                            : params->scale_criterion == "change" ? cuda::EarlyExitScale::kChange
                                                                  : cuda::EarlyExitScale::kMass;
  options.use_scale = params->use_scale;
  options.use_direction = params->use_direction;
  options.decision_window = params->decision_window;
  options.enabled = params->enabled;
  m.early_exit = options;
}

CudaEngine::EarlyExitCounts CudaEngine::early_exit_counts() const {
  unsigned long long words[3] = {0, 0, 0};
  cuda::check(cudaStreamSynchronize(impl_->stream), "sync");
  if (impl_->walk_counts.data()) impl_->walk_counts.download(words, sizeof(words));
  return {static_cast<int64_t>(words[0]), static_cast<int64_t>(words[1]), static_cast<int64_t>(words[2])};
}

void CudaEngine::reset_early_exit_counts() {
  if (!impl_->walk_counts.data()) return;
  cuda::check(cudaMemsetAsync(impl_->walk_counts.data(), 0, impl_->walk_counts.bytes(), impl_->stream),
              "memset");
  cuda::check(cudaStreamSynchronize(impl_->stream), "sync");
}

// Decode-time selection (kind D); the work is in engine/cuda/cuda_sparse_decode.cu.
void CudaEngine::start_sparse_decode(const DeviceSelectionSpec& spec) {
  Impl& m = *impl_;
  m.drop_graph();
  m.sparse.reset();
  if (m.host_length.empty()) throw InputError("start_sparse_decode: allocate and fill the cache first");
  for (int32_t length : m.host_length)
    if (length != m.host_length[0])
      throw InputError("start_sparse_decode: every sequence must hold the same number of entries");
  SparseCacheView view;
  view.config = &m.config;
  view.batch = m.batch;
  view.capacity = m.capacity;
  view.length = m.host_length[0];
  for (const auto& k : m.k_cache) view.keys.push_back(k.as<bf16>());
  m.sparse = std::make_unique<CudaSparseDecode>(spec, view, m.stream);
}

void CudaEngine::stop_sparse_decode() {
  impl_->drop_graph();
  impl_->sparse.reset();
}

std::vector<int32_t> CudaEngine::sparse_selection(int layer, int seq, int q_head) const {
  if (!impl_->sparse) return {};
  return impl_->sparse->selection(layer, seq, q_head, impl_->stream);
}

std::vector<float> CudaEngine::sparse_query(int layer, int seq) const {
  if (!impl_->sparse) return {};
  return impl_->sparse->recorded_query(layer, seq, impl_->stream);
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
  return impl_->host_length[int64_t(layer) * impl_->heads_total() + seq * impl_->config.n_kv_heads + head];
}

int64_t CudaEngine::device_bytes() const { return int64_t(cuda::device_bytes_in_use()); }
int64_t CudaEngine::device_peak_bytes() const { return int64_t(cuda::device_bytes_peak()); }
void CudaEngine::reset_peak_bytes() { cuda::reset_device_peak(); }

void CudaEngine::synchronize() const { cuda::check(cudaStreamSynchronize(impl_->stream), "sync"); }

}  // namespace kvb
