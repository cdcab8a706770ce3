// CudaEngine's decode step (engine/cuda/cuda_engine.h): the batched greedy step over the device
// cache, captured once into a CUDA graph and replayed, with its decode-time methods (ART's walk,
// kernels/cuda/early_exit_decode.h; decode selection, engine/cuda/cuda_sparse_decode.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/cuda/cuda_engine_impl.h"
#include "engine/errors.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"

namespace kvb {

using bf16 = __nv_bfloat16;

int CudaEngine::Impl::decode_length_bound_for(int longest) const {
  const int headroom = std::max(256, longest / 8);
  return std::min(capacity, (longest + headroom + 63) / 64 * 64);
}

void CudaEngine::Impl::fit_decode_length_bound(int longest) {
  const int wanted = decode_length_bound_for(longest);
  if (longest <= decode_length_bound && wanted * 2 > decode_length_bound) return;
  decode_length_bound = wanted;
  drop_graph();
}

void CudaEngine::Impl::drop_graph() {
  if (graph_exec) cudaGraphExecDestroy(graph_exec);
  if (graph) cudaGraphDestroy(graph);
  graph_exec = nullptr;
  graph = nullptr;
}

void CudaEngine::Impl::decode_graph_body() {
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
      throw CapacityError("decode step would exceed the cache capacity " +
                          std::to_string(m.capacity));
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
      cuda::check(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal),
                  "begin capture");
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
                     " entries (the kernel's tile); got block_size " +
                     std::to_string(params->block_size));
  if (params->oracle_tolerance > 0)
    throw InputError(
        "ART's oracle mode runs on the CPU engine only; drop oracle_tolerance for the GPU");
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
  return {static_cast<int64_t>(words[0]), static_cast<int64_t>(words[1]),
          static_cast<int64_t>(words[2])};
}

void CudaEngine::reset_early_exit_counts() {
  if (!impl_->walk_counts.data()) return;
  cuda::check(
      cudaMemsetAsync(impl_->walk_counts.data(), 0, impl_->walk_counts.bytes(), impl_->stream),
      "memset");
  cuda::check(cudaStreamSynchronize(impl_->stream), "sync");
}

// Decode-time selection (kind D); the work is in engine/cuda/cuda_sparse_decode.cu.
void CudaEngine::start_sparse_decode(const DeviceSelectionSpec& spec) {
  Impl& m = *impl_;
  m.drop_graph();
  m.sparse.reset();
  if (m.host_length.empty())
    throw InputError("start_sparse_decode: allocate and fill the cache first");
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

}  // namespace kvb
