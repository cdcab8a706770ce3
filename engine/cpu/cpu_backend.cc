#include "engine/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "engine/generation.h"

namespace kvb {

CpuBackend::CpuBackend(const ModelWeights& weights, KvDtype kv_dtype, ForwardPrecision precision)
    : engine_(weights, kv_dtype, precision) {}

int64_t CpuBackend::weight_bytes() const {
  const ModelWeights& w = weights();
  constexpr int64_t kFloat = sizeof(float);
  int64_t bytes = w.token_embedding.storage_bytes() + w.output.storage_bytes() +
                  static_cast<int64_t>(w.output_norm.size()) * kFloat;
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      bytes += m->storage_bytes();
    for (const auto* t : {&l.attn_norm, &l.bq, &l.bk, &l.bv, &l.ffn_norm})
      bytes += static_cast<int64_t>(t->size()) * kFloat;
  }
  return bytes;
}

void CpuBackend::reserve(int sequences, int) {
  stores_.assign(sequences, KvStore());
  plans_.assign(sequences, nullptr);
  decodes_wide_.assign(sequences, false);
}

int CpuBackend::max_sequences(int capacity) const {
  const ModelConfig& c = config();
  const int64_t per_sequence = int64_t{2} * c.n_layers * c.n_kv_heads * c.head_dim *
                               kv_dtype_bytes(engine_.kv_dtype()) * std::max(capacity, 1);
  const int64_t available = int64_t{sysconf(_SC_AVPHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  // Half of the free memory, so that the policies' scoring and the OS keep room.
  return static_cast<int>(std::clamp<int64_t>(available / 2 / per_sequence, 1, 1 << 16));
}

std::vector<float> CpuBackend::prefill(int seq, std::span<const TokenId> ids,
                                       const CaptureRequest& request, PrefillCapture& capture) {
  KvStore& store = stores_.at(seq);
  store = engine_.make_store();
  decodes_wide_.at(seq) = false;
  return engine_.forward_chunk(ids, store, request, &capture, 0);
}

PrefillView CpuBackend::prefill_view(int seq, const PrefillCapture& capture,
                                     const CaptureRequest& request, KvStore&) const {
  // The policies read float pointers: a 16-bit prompt is widened in place (its values unchanged),
  // and narrowed back by compact() or start_decode(). Forks made before are 16-bit copies, so the
  // prompt exists once in f32 at most, as in an f32 cache (docs/engine.md §3.1.1).
  stores_.at(seq).widen();
  return make_prefill_view(weights(), &stores_.at(seq), capture, request);
}

void CpuBackend::fork(int from, int to) {
  stores_.at(to) = stores_.at(from);  // before the view widens the prompt: in its dtype
  decodes_wide_.at(to) = decodes_wide_.at(from);
}

void CpuBackend::compact(int seq, const KeptIndices& kept, int spare_tokens) {
  KvStore& store = stores_.at(seq);
  for (int l = 0; l < config().n_layers; ++l) store.compact(l, kept[l], spare_tokens);
  store.narrow();  // widened for the policies' view, if it was the prompt's sequence
}

std::vector<TokenId> CpuBackend::extend(std::span<const int> sequences,
                                        std::span<const TokenId> ids, int first_position) {
  std::vector<TokenId> next;
  for (int seq : sequences)
    next.push_back(argmax(
        engine_.forward_chunk(ids, stores_.at(seq), CaptureRequest{}, nullptr, first_position)));
  return next;
}

void CpuBackend::start_decode(int seq, CachePlan& plan, int prompt_tokens, int budget_tokens) {
  plans_.at(seq) = &plan;
  decodes_wide_.at(seq) = decode_reads_f32_rows(plan);
  start_decode_policies(plan, stores_.at(seq), prompt_tokens, budget_tokens);
}

std::vector<TokenId> CpuBackend::decode(std::span<const DecodeInput> inputs) {
  std::vector<TokenId> next;
  next.reserve(inputs.size());
  for (const DecodeInput& in : inputs) {
    CachePlan* plan = plans_.at(in.sequence);
    if (!plan) throw std::logic_error("CpuBackend::decode: start_decode was not called");
    next.push_back(argmax(
        engine_.decode_step(in.token, in.position, in.step, stores_.at(in.sequence), *plan)));
  }
  return next;
}

int64_t CpuBackend::kv_bytes(int seq) const {
  const KvStore& store = stores_.at(seq);
  return decodes_wide_.at(seq) ? store.kv_bytes() : store.kv_bytes_narrowed();
}

int64_t CpuBackend::peak_memory_bytes() const { return peak_rss_bytes(); }

}  // namespace kvb
