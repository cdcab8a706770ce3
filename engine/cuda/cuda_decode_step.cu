// CudaEngine's decode step (engine/cuda/cuda_engine.h): the batched greedy step over the device
// cache, captured once into a CUDA graph and replayed, with its decode-time methods (ART's walk,
// kernels/cuda/early_exit_decode.h; decode selection, engine/cuda/cuda_sparse_decode.h), and the
// question appended after compaction in one forward (extend) through the same ragged attention.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/errors.h"
#include "engine/cuda/cuda_engine_impl.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"

namespace kvb {

using bf16 = __nv_bfloat16;

int CudaEngine::Impl::decode_length_bound_for(int longest) const {
  const int headroom = std::max(256, longest / 8);
  return std::min(capacity, (longest + headroom + 63) / 64 * 64);
}

void CudaEngine::Impl::fit_decode_length_bound(DecodeGraph& step, int longest) {
  const int wanted = decode_length_bound_for(longest);
  if (longest <= step.length_bound && wanted * 2 > step.length_bound) return;
  step.length_bound = wanted;
  drop_graph(step);
}

void CudaEngine::Impl::drop_graph(DecodeGraph& step) {
  if (step.exec) cudaGraphExecDestroy(step.exec);
  if (step.graph) cudaGraphDestroy(step.graph);
  step.exec = nullptr;
  step.graph = nullptr;
}

void CudaEngine::Impl::drop_graph() {
  for (auto& [range, step] : decode_graphs) drop_graph(step);
}

cuda::DecodeAttentionArgs CudaEngine::Impl::decode_attention_args(int l, int rows,
                                                                  const int64_t* kv_offset,
                                                                  int32_t* kv_length,
                                                                  int length_bound) const {
  cuda::DecodeAttentionArgs a;
  a.q = ptr<bf16>(qkv);
  a.q_seq_stride = qkv_width();
  a.k = ptr<bf16>(k_cache[l]);
  a.v = ptr<bf16>(v_cache[l]);
  a.kv_offset = kv_offset;
  a.kv_length = kv_length;
  a.max_kv_length = length_bound;
  a.out = ptr<bf16>(attn_out);
  a.out_seq_stride = config.n_query_heads * config.head_dim;
  a.batch = rows;
  a.n_query_heads = config.n_query_heads;
  a.n_kv_heads = config.n_kv_heads;
  a.head_dim = config.head_dim;
  a.scale = 1.f / std::sqrt(float(config.head_dim));
  return a;
}

CudaEngine::Impl::DenseSplitLengths::DenseSplitLengths(const Impl& m, int first, int count,
                                                       int length_bound)
    : rows(count * m.config.n_kv_heads) {
  const int hkv = m.heads_total();
  const int64_t first_slot = int64_t(first) * m.config.n_kv_heads;
  lengths.resize(size_t(m.config.n_layers) * rows);
  for (int l = 0; l < m.config.n_layers; ++l)
    for (int i = 0; i < rows; ++i)
      lengths[size_t(l) * rows + i] = m.host_length[int64_t(l) * hkv + first_slot + i] + 1;
  const int longest = *std::max_element(lengths.begin(), lengths.end());
  const int grow = std::max(0, length_bound - longest);
  for (int32_t& length : lengths) length += grow;
}

// Sequences [first, first + count) only: the weights are read once for the range's rows, and every
// per-sequence array (tokens, positions, KV offsets and lengths, the ART walkers' words, logits,
// argmax keys, a selection's metadata) is addressed from the first sequence on, so the other
// sequences' caches and state are neither read nor written.
void CudaEngine::Impl::decode_graph_body(int first, int count, int length_bound) {
  const int d = config.d_model;
  const int hkv = heads_total();
  const int64_t first_slot = int64_t(first) * config.n_kv_heads;
  int32_t* step_tokens = ptr<int32_t>(tokens) + first;
  int32_t* step_positions = ptr<int32_t>(positions) + first;
  float* step_logits = ptr<float>(logits) + int64_t(first) * config.vocab_size;
  unsigned long long* step_argmax_keys = ptr<unsigned long long>(argmax_keys) + first;
  cuda::embedding_gather(ptr<bf16>(embedding), step_tokens, count, d, ptr<float>(residual), stream);
  const DenseSplitLengths split_lengths(*this, first, count, length_bound);
  run_layers(count, step_positions, true, [&](int l, const cuda::RopeArgs& rope) {
    const int64_t* offsets = ptr<int64_t>(kv_offset) + int64_t(l) * hkv + first_slot;
    int32_t* lengths = ptr<int32_t>(kv_length) + int64_t(l) * hkv + first_slot;
    cuda::DecodeAttentionArgs a = decode_attention_args(l, count, offsets, lengths, length_bound);
    a.workspace = ptr<float>(decode_workspace);
    if (eviction && eviction->evicts(l)) {
      // The statistic needs the rotated query in memory and the attention's log-sum-exp: the
      // append runs on its own, as on the index-list path.
      cuda::rope_append_kv_decode(rope, offsets, lengths, ptr<bf16>(k_cache[l]),
                                  ptr<bf16>(v_cache[l]), stream);
      a.lse = eviction->lse();
      cuda::decode_attention(a, stream);
      eviction->evict(l, a, ptr<bf16>(k_cache[l]), ptr<bf16>(v_cache[l]), lengths, rope.positions,
                      first, stream);
      return;
    }
    if (sparse && sparse->selects(l)) {  // the index-list path appends in a kernel of its own
      cuda::rope_append_kv_decode(rope, offsets, lengths, ptr<bf16>(k_cache[l]),
                                  ptr<bf16>(v_cache[l]), stream);
      sparse->attend(l, a, first - sparse_first, stream);
      return;
    }
    // The dense kernel and the ART walk append the step's token themselves (one boundary fewer).
    a.append = cuda::decode_append_for(rope, ptr<bf16>(k_cache[l]), ptr<bf16>(v_cache[l]), lengths);
    if (early_exit) {
      cuda::EarlyExitDecodeArgs walk;
      walk.attention = a;
      walk.options = *early_exit;
      walk.walker_state = ptr<int32_t>(walker_state) + first_slot * cuda::kStateWords;
      walk.totals = ptr<unsigned long long>(walk_counts);
      cuda::early_exit_decode(walk, stream);
    } else {
      a.chunk_size = cuda::dense_decode_chunk(a, split_lengths.layer(l), split_lengths.rows);
      cuda::decode_attention(a, stream);
    }
  });
  if (norms_folded) {
    cuda::lm_head_argmax(folded_norm(output_norm, 0), lm_head(), step_logits, count, d,
                         config.vocab_size, step_argmax_keys, step_tokens, stream);
  } else {
    cuda::lm_head_argmax(cublas, output_normed_rows(0, count), lm_head(), step_logits, count, d,
                         config.vocab_size, step_argmax_keys, step_tokens, stream);
  }
  cuda::advance_lengths(nullptr, 0, step_positions, count, 1, stream);
}

namespace {

void check_range(int first, int count, int batch, const char* call) {
  if (first < 0 || count < 1 || first + count > batch)
    throw InputError(std::string(call) + ": sequences " + std::to_string(first) + " .. " +
                     std::to_string(first + count - 1) + " are not in the batch of " +
                     std::to_string(batch));
}

}  // namespace

void CudaEngine::set_next_tokens(const std::vector<int32_t>& tokens,
                                 const std::vector<int32_t>& positions) {
  const Impl& m = *impl_;
  if (static_cast<int>(tokens.size()) != m.batch || static_cast<int>(positions.size()) != m.batch)
    throw InputError("set_next_tokens: one token and one position per sequence expected");
  set_next_tokens(0, tokens, positions);
}

void CudaEngine::set_next_tokens(int first, const std::vector<int32_t>& tokens,
                                 const std::vector<int32_t>& positions) {
  Impl& m = *impl_;
  const int count = static_cast<int>(tokens.size());
  if (positions.size() != tokens.size())
    throw InputError("set_next_tokens: one position per token expected");
  check_range(first, count, m.batch, "set_next_tokens");
  m.tokens.upload(tokens.data(), tokens.size() * 4, size_t(first) * 4);
  m.positions.upload(positions.data(), positions.size() * 4, size_t(first) * 4);
  std::copy(positions.begin(), positions.end(), m.host_position.begin() + first);
}

void CudaEngine::decode_step(bool use_graph) { decode_step(0, impl_->batch, use_graph); }

void CudaEngine::decode_step(int first, int count, bool use_graph) {
  Impl& m = *impl_;
  check_range(first, count, m.batch, "decode_step");
  const int hkv = m.heads_total();
  const int64_t slot_begin = int64_t(first) * m.config.n_kv_heads;
  const int64_t slot_end = int64_t(first + count) * m.config.n_kv_heads;
  int longest = 0, shortest = m.capacity;
  for (int l = 0; l < m.config.n_layers; ++l)
    for (int64_t s = slot_begin; s < slot_end; ++s) {
      const int32_t length = m.host_length[int64_t(l) * hkv + s];
      if (length + 1 > m.capacity)
        throw CapacityError("decode step would exceed the cache capacity " +
                            std::to_string(m.capacity));
      longest = std::max(longest, length + 1);
      if (l == 0) shortest = std::min(shortest, length + 1);
    }
  const std::pair<int, int> range(first, count);
  if (!m.decode_graphs.count(range) && m.decode_graphs.size() >= Impl::kMaxDecodeGraphs) {
    m.drop_graph();
    m.decode_graphs.clear();
  }
  Impl::DecodeGraph& step = m.decode_graphs[range];
  m.fit_decode_length_bound(step, longest);
  if (m.sparse && (first < m.sparse_first || first + count > m.sparse_first + m.sparse_count))
    throw InputError("decode_step: sequences [" + std::to_string(first) + ", " +
                     std::to_string(first + count) + ") reach beyond the decode selection's [" +
                     std::to_string(m.sparse_first) + ", " +
                     std::to_string(m.sparse_first + m.sparse_count) + ")");
  if (m.sparse) {  // a moving step budget is fixed in a captured step: re-capture when it moves
    // Sequences that decoded on their own may differ in length: the shortest bounds the budget
    // (the top-k never asks for more entries than every list holds).
    const int key = m.sparse->prepare_step(shortest);
    if (key != step.sparse_key) m.drop_graph(step);
    step.sparse_key = key;
  }
  if (!use_graph) {
    m.decode_graph_body(first, count, step.length_bound);
  } else {
    if (!step.exec) {
      cuda::check(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal),
                  "begin capture");
      m.decode_graph_body(first, count, step.length_bound);
      cuda::check(cudaStreamEndCapture(m.stream, &step.graph), "end capture");
      cuda::check(cudaGraphInstantiate(&step.exec, step.graph, 0), "graph instantiate");
    }
    cuda::check(cudaGraphLaunch(step.exec, m.stream), "graph launch");
  }
  for (int l = 0; l < m.config.n_layers; ++l)
    for (int64_t s = slot_begin; s < slot_end; ++s) ++m.host_length[int64_t(l) * hkv + s];
  if (m.eviction) m.eviction->follow_lengths(m.host_length, first, count);
  for (int b = first; b < first + count; ++b) ++m.host_position[b];
}

std::vector<int32_t> CudaEngine::next_tokens() const { return next_tokens(0, impl_->batch); }

std::vector<int32_t> CudaEngine::next_tokens(int first, int count) const {
  check_range(first, count, impl_->batch, "next_tokens");
  std::vector<int32_t> out(count);
  cuda::check(cudaStreamSynchronize(impl_->stream), "decode");
  impl_->tokens.download(out.data(), out.size() * 4, size_t(first) * 4);
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

// Decode-time eviction (kind C); the work is in engine/cuda/cuda_decode_eviction.cu.
void CudaEngine::start_decode_eviction(const DeviceEvictionSpec& spec) {
  start_decode_eviction(spec, 0, impl_->batch);
}

void CudaEngine::start_decode_eviction(const DeviceEvictionSpec& spec, int first, int count) {
  Impl& m = *impl_;
  check_range(first, count, m.batch, "start_decode_eviction");
  m.drop_graph();
  m.eviction.reset();
  if (m.host_length.empty())
    throw InputError("start_decode_eviction: allocate and fill the cache first");
  if (m.sparse || m.early_exit)
    throw InputError(
        "start_decode_eviction: decode eviction beside a decode selection or ART has no device "
        "form; run that plan on the CPU engine");
  m.eviction = std::make_unique<CudaDecodeEviction>(spec, m.config, m.batch, m.capacity,
                                                    m.host_length, first, count, m.stream);
}

void CudaEngine::stop_decode_eviction() {
  impl_->drop_graph();
  impl_->eviction.reset();
}

std::vector<int32_t> CudaEngine::eviction_origins(int layer, int seq, int head) const {
  const Impl& m = *impl_;
  if (!m.eviction) return {};
  const int64_t slot = int64_t(seq) * m.config.n_kv_heads + head;
  return m.eviction->origins(layer, slot, m.host_length[int64_t(layer) * m.heads_total() + slot],
                             m.stream);
}

// Decode-time selection (kind D); the work is in engine/cuda/cuda_sparse_decode.cu.
void CudaEngine::start_sparse_decode(const DeviceSelectionSpec& spec) {
  start_sparse_decode(spec, 0, impl_->batch);
}

void CudaEngine::start_sparse_decode(const DeviceSelectionSpec& spec, int first, int count) {
  Impl& m = *impl_;
  m.drop_graph();
  m.sparse.reset();
  if (m.host_length.empty())
    throw InputError("start_sparse_decode: allocate and fill the cache first");
  check_range(first, count, m.batch, "start_sparse_decode");
  const int hkv = m.heads_total();
  const int64_t slot_begin = int64_t(first) * m.config.n_kv_heads;
  const int64_t slot_end = int64_t(first + count) * m.config.n_kv_heads;
  const int32_t length = m.host_length[slot_begin];
  for (int l = 0; l < m.config.n_layers; ++l)
    for (int64_t s = slot_begin; s < slot_end; ++s)
      if (m.host_length[int64_t(l) * hkv + s] != length)
        throw InputError(
            "start_sparse_decode: every sequence it selects for must hold the same number of "
            "entries");
  SparseCacheView view;
  view.config = &m.config;
  view.batch = count;
  view.capacity = m.capacity;
  view.length = length;
  const int64_t first_row = slot_begin * m.capacity * m.config.head_dim;
  for (const auto& k : m.k_cache) view.keys.push_back(k.as<bf16>() + first_row);
  view.fits = &m.fit_memo;
  m.sparse = std::make_unique<CudaSparseDecode>(spec, view, m.stream);
  m.sparse_first = first;
  m.sparse_count = count;
}

CudaEngine::ProjectionFitCounts CudaEngine::projection_fit_counts() const {
  return {.fits = impl_->fit_memo.fits, .reuses = impl_->fit_memo.reuses};
}

void CudaEngine::stop_sparse_decode() {
  impl_->drop_graph();
  impl_->sparse.reset();
}

std::vector<int32_t> CudaEngine::sparse_selection(int layer, int seq, int q_head) const {
  if (!impl_->sparse) return {};
  return impl_->sparse->selection(layer, seq - impl_->sparse_first, q_head, impl_->stream);
}

std::vector<float> CudaEngine::sparse_selection_bias(int layer, int seq, int q_head) const {
  if (!impl_->sparse) return {};
  return impl_->sparse->selection_bias(layer, seq - impl_->sparse_first, q_head, impl_->stream);
}

std::vector<float> CudaEngine::sparse_query(int layer, int seq) const {
  if (!impl_->sparse) return {};
  return impl_->sparse->recorded_query(layer, seq - impl_->sparse_first, impl_->stream);
}

namespace {

// The rows of one extend chunk: n tokens for `count` sequences, row t * count + s for token t of
// sequence s, so the chunk's last token rows lie together at the end. Each row is a decode query
// of its own over its sequence's cache rows: KV head h of row (t, s) starts where the sequence's
// head does and holds the sequence's entries and the chunk's tokens before t (the append kernel
// writes row t at that length and advances it by one before the attention reads).
struct ExtendRows {
  std::vector<int32_t> ids, positions;
  std::vector<int64_t> offsets;  // [L][rows * Hkv]
  std::vector<int32_t> lengths;  // [L][rows * Hkv]
  int longest = 0;               // longest row's entries once its own token is in
};

ExtendRows extend_rows(const ModelConfig& c, const std::vector<int64_t>& host_offset,
                       const std::vector<int32_t>& host_length, int heads_total, int first,
                       int count, const int32_t* ids, int n, int position) {
  const int rows = n * count, hkv = c.n_kv_heads;
  ExtendRows r;
  r.ids.resize(rows);
  r.positions.resize(rows);
  r.offsets.resize(size_t(c.n_layers) * rows * hkv);
  r.lengths.resize(r.offsets.size());
  for (int t = 0; t < n; ++t)
    for (int s = 0; s < count; ++s) {
      const int row = t * count + s;
      r.ids[row] = ids[t];
      r.positions[row] = position + t;
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < hkv; ++h) {
          const int64_t slot = int64_t(l) * heads_total + int64_t(first + s) * hkv + h;
          const size_t at = (size_t(l) * rows + row) * hkv + h;
          r.offsets[at] = host_offset[slot];
          r.lengths[at] = host_length[slot] + t;
          r.longest = std::max(r.longest, host_length[slot] + t + 1);
        }
    }
  return r;
}

}  // namespace

std::vector<int32_t> CudaEngine::extend(int first, int count, const std::vector<int32_t>& ids,
                                        int first_position) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  check_range(first, count, m.batch, "extend");
  if (ids.empty()) throw InputError("extend: no tokens to append");
  if (m.sparse || m.eviction || m.early_exit)
    throw InputError(
        "extend: a decode selection, eviction or ART walk is active; stop it first (the question "
        "goes in before any decode-time method starts)");
  const int hkv = m.heads_total(), total = static_cast<int>(ids.size());
  // The host lengths of the range's (layer, KV head) slots.
  auto for_each_length = [&](auto&& fn) {
    for (int l = 0; l < c.n_layers; ++l)
      for (int64_t s = int64_t(first) * c.n_kv_heads; s < int64_t(first + count) * c.n_kv_heads;
           ++s)
        fn(m.host_length[int64_t(l) * hkv + s]);
  };
  for_each_length([&](int32_t length) {
    if (length + total > m.capacity)
      throw CapacityError("extend of " + std::to_string(total) + " tokens exceeds the cache " +
                          "capacity " + std::to_string(m.capacity));
  });
  // As many tokens per chunk as keep (sequences x tokens) rows within the prefill's activation
  // budget and the decode attention's grid (a row per grid z index: at most 65,535).
  constexpr int kMaxAttentionRows = 65535;
  const int per_chunk = std::clamp(
      std::min(m.prefill_rows_within_activation_budget(), kMaxAttentionRows) / count, 1, total);
  try {
    m.ensure_activations(per_chunk * count);
  } catch (const cuda::OutOfMemory& e) {
    throw CapacityError("extend of " + std::to_string(count) + " sequences x " +
                        std::to_string(per_chunk) + " tokens does not fit: " + e.what());
  }
  const int d = c.d_model;
  int last_chunk_rows = 0;
  for (int begin = 0; begin < total; begin += per_chunk) {
    const int n = std::min(per_chunk, total - begin), rows = n * count;
    const ExtendRows r = extend_rows(c, m.host_offset, m.host_length, hkv, first, count,
                                     ids.data() + begin, n, first_position + begin);
    cuda::DeviceBuffer row_ids(rows * 4, "extend ids"), row_positions(rows * 4, "extend positions");
    cuda::DeviceBuffer offsets(r.offsets.size() * 8, "extend offsets");
    cuda::DeviceBuffer lengths(r.lengths.size() * 4, "extend lengths");
    // The rows' split layout (rows x the longest row) sizes the workspace, where the decode step's
    // bound over every layout would reserve a chunk per 64 keys for each of the many rows.
    const int64_t* all_offsets = offsets.as<int64_t>();
    int32_t* all_lengths = lengths.as<int32_t>();
    auto layer_at = [&](int l) { return int64_t(l) * rows * c.n_kv_heads; };
    auto attention_of = [&](int l) {
      return m.decode_attention_args(l, rows, all_offsets + layer_at(l), all_lengths + layer_at(l),
                                     r.longest);
    };
    cuda::DeviceBuffer workspace(
        cuda::decode_attention_layout_workspace_floats(attention_of(0)) * 4,
        "extend attention workspace");
    row_ids.upload(r.ids.data(), rows * 4);
    row_positions.upload(r.positions.data(), rows * 4);
    offsets.upload(r.offsets.data(), r.offsets.size() * 8);
    lengths.upload(r.lengths.data(), r.lengths.size() * 4);
    cuda::embedding_gather(m.embedding.as<bf16>(), row_ids.as<int32_t>(), rows, d,
                           m.residual.as<float>(), m.stream);
    m.run_layers(rows, row_positions.as<int32_t>(), true, [&](int l, const cuda::RopeArgs& rope) {
      cuda::DecodeAttentionArgs a = attention_of(l);
      a.workspace = workspace.as<float>();
      // Every row's K and V first (rotating its query in place), then the attention: a row reads
      // the rows of earlier tokens of its chunk, which one fused kernel could not order.
      cuda::rope_append_kv_decode(rope, all_offsets + layer_at(l), all_lengths + layer_at(l),
                                  m.k_cache[l].as<bf16>(), m.v_cache[l].as<bf16>(), m.stream);
      cuda::decode_attention(a, m.stream);
    });
    // The buffers above are freed at the end of this iteration: the work that reads them first.
    cuda::check(cudaStreamSynchronize(m.stream), "extend");
    for_each_length([&](int32_t& length) { length += n; });
    last_chunk_rows = rows;
  }
  for (int s = first; s < first + count; ++s) m.host_position[s] = first_position + total;
  m.kv_length.upload(m.host_length.data(), m.host_length.size() * 4);
  // The greedy next token of each sequence from its last token's row (the chunk's last `count`).
  cuda::lm_head_argmax(m.cublas, m.output_normed_rows(last_chunk_rows - count, count), m.lm_head(),
                       m.logits.as<float>() + int64_t(first) * c.vocab_size, count, d, c.vocab_size,
                       m.argmax_keys.as<unsigned long long>() + first,
                       m.tokens.as<int32_t>() + first, m.stream);
  return next_tokens(first, count);
}

}  // namespace kvb
