// The Engine interface (engine/engine.h) on the CPU: each sequence is a host KvStore driven by the
// CPU forward pass (CpuEngine), in the element type it was made with. Every plan runs here;
// sequences of a batch decode one after another (the CPU engine is the accuracy reference, not a
// throughput engine).
#pragma once

#include <vector>

#include "engine/cpu/forward.h"
#include "engine/engine.h"

namespace kvb {

class CpuBackend final : public Engine {
 public:
  // `weights` must outlive the backend; `kv_dtype` is its caches' element type (engine/kv_store.h);
  // `precision` the forward's (engine/cpu/device_numerics.h).
  explicit CpuBackend(const ModelWeights& weights, KvDtype kv_dtype = KvDtype::kF32,
                      ForwardPrecision precision = ForwardPrecision::kF32);

  const ModelConfig& config() const override { return engine_.config(); }
  std::string backend_name() const override { return "cpu"; }
  const ModelWeights& weights() const override { return engine_.weights(); }
  int64_t weight_bytes() const override;
  void check_plan(const CachePlan&) const override {}

  void reserve(int sequences, int capacity) override;
  int max_sequences(int capacity) const override;
  std::vector<float> prefill(int seq, std::span<const TokenId> ids, const CaptureRequest& request,
                             PrefillCapture& capture) override;
  PrefillView prefill_view(int seq, const PrefillCapture& capture, const CaptureRequest& request,
                           KvStore& host_copy) const override;
  KvStore host_store(int seq) const override { return stores_.at(seq).widened(); }
  void fork(int from, int to) override;
  void compact(int seq, const KeptIndices& kept, int spare_tokens) override;
  std::vector<TokenId> extend(std::span<const int> sequences, std::span<const TokenId> ids,
                              int first_position) override;
  void start_decode(int seq, CachePlan& plan, int prompt_tokens, int budget_tokens) override;
  std::vector<TokenId> decode(std::span<const DecodeInput> inputs) override;
  void finish_decode(int seq) override { plans_.at(seq) = nullptr; }
  // The bytes of the cache the sequence decodes from: a prompt widened for the policies' view
  // counts at its dtype's size (compact or start_decode narrows it back); a store widened for a
  // decode selector or ART, from start_decode on, 4 bytes an element.
  int64_t kv_bytes(int seq) const override;
  int64_t peak_memory_bytes() const override;
  void reset_peak_memory() override {}  // the process's peak RSS cannot be reset

  // Teacher-forced layer inputs for every prefill and extension (CpuEngine::force_layer_inputs).
  void force_layer_inputs(const std::vector<std::vector<float>>* inputs) {
    engine_.force_layer_inputs(inputs);
  }

  // The sequence's store (tests compare it with the single-sequence Generator's).
  const KvStore& store(int seq) const { return stores_.at(seq); }

 private:
  CpuEngine engine_;
  // Mutable: prefill_view() widens a 16-bit prompt in place, a change of representation that
  // keeps every value (KvStore::widen).
  mutable std::vector<KvStore> stores_;
  std::vector<CachePlan*> plans_;
  std::vector<bool> decodes_wide_;  // started under a plan that reads f32 rows (kv_bytes)
};

}  // namespace kvb
