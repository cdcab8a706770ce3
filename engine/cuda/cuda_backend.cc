#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "common/errors.h"
#include "engine/model.h"
#include "engine/weight_source.h"

namespace kvb {

namespace {

std::unique_ptr<CudaEngine> device_engine_for(const ModelWeights& weights) {
  if (!weights_live_on_device_only(weights)) return CudaEngine::from_weights(weights);
  if (weights.config.dummy_weights) return CudaEngine::from_preset(weights.config, kPresetSeed);
  return CudaEngine::from_source(*open_weight_source(weights.source));
}

}  // namespace

CudaBackend::CudaBackend(const ModelWeights& weights)
    : weights_(weights), engine_(device_engine_for(weights)) {}

const ModelWeights& CudaBackend::weights_with_output_projection() const {
  if (!weights_live_on_device_only(weights_)) return weights_;
  if (!output_projections_) {
    auto w = std::make_unique<ModelWeights>();
    w->config = weights_.config;
    w->source = weights_.source;
    w->layers.resize(w->config.n_layers);
    for (int l = 0; l < w->config.n_layers; ++l) w->layers[l].wo = engine_->output_projection(l);
    output_projections_ = std::move(w);
  }
  return *output_projections_;
}

void CudaBackend::check_plan(const CachePlan& plan) const {
  auto refuse = [&](const std::string& why) {
    throw InputError("policy '" + plan.label + "' cannot run on the CUDA engine: " + why +
                     "; run it with \"device\": \"cpu\"");
  };
  if (plan.decode_eviction && !plan.decode_eviction->runs_on_device())
    refuse("its decode-time eviction '" + plan.decode_eviction->name() + "' has no device form");
  if (plan.decode_eviction && (plan.selector || plan.early_exit))
    refuse("decode-time eviction beside a decode selector or ART runs on the CPU engine only");
  if (plan.selector && !plan.selector->runs_on_device())
    refuse("its decode selector '" + plan.selector->name() + "' has no device form");
  if (plan.early_exit) {
    if (plan.early_exit->oracle_tolerance > 0) refuse("ART's oracle mode runs on the CPU only");
    if (plan.early_exit->block_size != 64) refuse("ART on the GPU walks 64-entry blocks");
    if (plan.early_exit->sink_tokens > 64) refuse("ART on the GPU takes at most 64 sink tokens");
  }
}

void CudaBackend::reserve(int sequences, int capacity) {
  engine_->allocate_cache(sequences, capacity);
  started_.assign(sequences, Started{});
  decode_configured_ = false;
}

int CudaBackend::max_sequences(int capacity) const { return engine_->max_batch(capacity); }

std::vector<float> CudaBackend::prefill(int seq, std::span<const TokenId> ids,
                                        const CaptureRequest& request, PrefillCapture& capture) {
  const std::vector<int32_t> tokens(ids.begin(), ids.end());
  return engine_->prefill_with_captures(seq, tokens, request, capture);
}

KvStore CudaBackend::downloaded_store(int seq, bool values) const {
  const ModelConfig& c = config();
  KvStore store = values ? KvStore(c.n_layers, c.n_kv_heads, c.head_dim)
                         : KvStore::keys_only(c.n_layers, c.n_kv_heads, c.head_dim);
  store.set_reported_bytes_per_element(2);
  const int64_t head_rows = engine_->capacity();
  for (int l = 0; l < c.n_layers; ++l) {
    // [Hkv, capacity, d] each: head h's entries are rows [h * capacity, h * capacity + length).
    const std::vector<float> keys = engine_->cached_sequence(l, seq, /*values=*/false);
    const std::vector<float> value_rows =
        values ? engine_->cached_sequence(l, seq, /*values=*/true) : std::vector<float>();
    const int length = engine_->length(l, seq, 0);
    for (int h = 1; h < c.n_kv_heads; ++h)
      if (engine_->length(l, seq, h) != length)
        throw std::logic_error(
            "CudaBackend::host_store: the heads of a compacted sequence differ "
            "in length; copy the prompt before compacting");
    store.reserve(length);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const size_t first = static_cast<size_t>(h) * head_rows * c.head_dim;
      store.append_rows(l, h, 0, length, &keys[first], values ? &value_rows[first] : nullptr);
    }
  }
  return store;
}

PrefillView CudaBackend::prefill_view(int seq, const PrefillCapture& capture,
                                      const CaptureRequest& request, KvStore& host_copy) const {
  const ModelWeights& weights =
      request.output_projection ? weights_with_output_projection() : weights_;
  if (!request.host_keys_values) return make_prefill_view(weights, nullptr, capture, request);
  if (host_copy.n_layers() == 0) host_copy = host_store(seq);
  return make_prefill_view(weights, &host_copy, capture, request);
}

void CudaBackend::compact(int seq, const KeptIndices& kept, int) { engine_->compact(seq, kept); }

std::vector<int32_t> CudaBackend::step(std::span<const DecodeInput> inputs) {
  if (inputs.empty()) return {};
  int first = inputs.front().sequence, last = first;
  for (const DecodeInput& in : inputs) {
    first = std::min(first, in.sequence);
    last = std::max(last, in.sequence);
  }
  if (first < 0 || last >= engine_->batch())
    throw std::out_of_range("CudaBackend: decode input for a sequence outside the batch");
  const int count = last - first + 1;
  std::vector<int32_t> tokens(count, 0), positions(count);
  for (int b = 0; b < count; ++b) positions[b] = engine_->next_position(first + b);
  for (const DecodeInput& in : inputs) {
    tokens[in.sequence - first] = in.token;
    positions[in.sequence - first] = in.position;
  }
  engine_->set_next_tokens(first, tokens, positions);
  engine_->decode_step(first, count, /*use_graph=*/true);
  const std::vector<int32_t> next = engine_->next_tokens(first, count);
  std::vector<int32_t> out;
  out.reserve(inputs.size());
  for (const DecodeInput& in : inputs) out.push_back(next[in.sequence - first]);
  return out;
}

std::vector<TokenId> CudaBackend::extend(std::span<const int> sequences,
                                         std::span<const TokenId> ids, int first_position) {
  // The question after compaction, before any decode-time method is set: one forward over every
  // (token, sequence) row of each run of consecutive sequences, each attending to its own
  // (ragged) cache.
  engine_->stop_sparse_decode();
  engine_->stop_decode_eviction();  // the CPU engine evicts from the first decode step on, too
  engine_->set_early_exit(std::nullopt);
  decode_configured_ = false;
  const std::vector<int32_t> question(ids.begin(), ids.end());
  std::vector<TokenId> next;
  next.reserve(sequences.size());
  for (size_t run = 0; run < sequences.size();) {
    size_t end = run + 1;
    while (end < sequences.size() && sequences[end] == sequences[end - 1] + 1) ++end;
    const int count = static_cast<int>(end - run);
    for (const int32_t token : engine_->extend(sequences[run], count, question, first_position))
      next.push_back(token);
    run = end;
  }
  return next;
}

void CudaBackend::start_decode(int seq, CachePlan& plan, int, int budget_tokens) {
  Started& started = started_.at(seq);
  started = Started{};
  started.plan = &plan;
  started.budget_tokens = budget_tokens;
  decode_configured_ = false;
}

void CudaBackend::configure_decode() {
  const CachePlan* first = nullptr;
  int first_seq = 0, last_seq = 0, budget = 0;
  for (size_t s = 0; s < started_.size(); ++s) {
    const CachePlan* plan = started_[s].plan;
    if (!plan) continue;
    last_seq = static_cast<int>(s);
    if (!first) {
      first = plan;
      first_seq = static_cast<int>(s);
      budget = started_[s].budget_tokens;
      continue;
    }
    const bool same_selection = (plan->selector == nullptr) == (first->selector == nullptr) &&
                                (!plan->selector || (plan->selector == first->selector &&
                                                     started_[s].budget_tokens == budget));
    if (!same_selection || plan->decode_eviction != first->decode_eviction ||
        plan->early_exit.has_value() != first->early_exit.has_value())
      throw std::logic_error(
          "CudaBackend: a batch decodes under one decode-time method; group "
          "the cells by decode_group_of()");
  }
  if (!first) throw std::logic_error("CudaBackend::decode: start_decode was not called");
  // The started sequences' range: the others (the prompt the cells were forked from, cells of
  // another decode group) hold other lengths and never step under this method.
  const int count = last_seq - first_seq + 1;
  engine_->stop_sparse_decode();
  engine_->stop_decode_eviction();
  engine_->set_early_exit(first->early_exit);
  engine_->reset_early_exit_counts();
  if (first->selector) {
    // No cache crosses to the host: what reads the prompt (rows fitted to its keys) runs on the
    // device.
    const std::optional<DeviceSelectionSpec> device =
        first->selector->device_selection(config(), budget);
    if (!device) throw std::logic_error("CudaBackend: selector without a device form");
    engine_->start_sparse_decode(*device, first_seq, count);
  }
  if (first->decode_eviction) {
    // In place of the policy's start(): the device holds its state from here on.
    const std::optional<DeviceEvictionSpec> eviction =
        first->decode_eviction->device_eviction(config().n_layers, budget);
    if (!eviction) throw std::logic_error("CudaBackend: decode eviction without a device form");
    engine_->start_decode_eviction(*eviction, first_seq, count);
  }
  decode_configured_ = true;
}

void CudaBackend::prepare_decode() {
  if (!decode_configured_) configure_decode();
}

std::vector<TokenId> CudaBackend::decode(std::span<const DecodeInput> inputs) {
  if (!decode_configured_) configure_decode();
  // ART's counts add up over every step: a cell's are those since its first step, which for
  // cells decoded one after another starts after the previous cell's last.
  std::optional<CudaEngine::EarlyExitCounts> now;
  for (const DecodeInput& in : inputs) {
    Started& started = started_.at(in.sequence);
    if (started.stepped) continue;
    started.stepped = true;
    if (!started.plan || !started.plan->early_exit) continue;
    if (!now) now = engine_->early_exit_counts();
    started.walks_before = *now;
  }
  const std::vector<int32_t> next = step(inputs);
  return std::vector<TokenId>(next.begin(), next.end());
}

void CudaBackend::finish_decode(int seq) {
  Started& started = started_.at(seq);
  if (started.plan && started.plan->early_exit) {
    // A cell that stopped at its first token walked nothing.
    const CudaEngine::EarlyExitCounts counts =
        started.stepped ? engine_->early_exit_counts() : started.walks_before;
    started.plan->early_exit_stats.blocks_visited = counts.visited - started.walks_before.visited;
    started.plan->early_exit_stats.blocks_total = counts.total - started.walks_before.total;
  }
  started.plan = nullptr;
}

int64_t CudaBackend::kv_bytes(int seq) const {
  const ModelConfig& c = config();
  int64_t entries = 0;
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) entries += engine_->length(l, seq, h);
  return entries * 2 * c.head_dim * 2;
}

}  // namespace kvb
