// The Engine interface (engine/engine.h) on the GPU, over CudaEngine: sequences are slots of the
// device KV cache, a decode step runs the contiguous range of slots that holds its inputs at once
// (one CUDA graph per range: the whole batch, or one sequence when cells decode one after another
// after a shared prefill), and compaction gathers kept rows on the device.
//
// What a plan may use here (check_plan refuses the rest, naming the method):
// - prefill policies: the statistics they ask for (CaptureRequest: attention column sums, window
//   attention sums, output perturbations, key norms) are computed on the device beside the
//   prefill (engine/cuda/prefill_statistics.h) and only these O(L) numbers per head come down;
//   the policy's own selection code (pooling, GQA reduction, budgets, top-k) runs on the host.
//   CriticalKV's ‖v W_o‖ is such a statistic too. A policy that reads the prompt's keys and values
//   (host_keys_values: KeyDiff, CAKE, AnDPro, TOVA) gets a host copy of them, made once per prefill
//   and shared by every cell that replays it; a request for W_o itself gets the host weights'
//   W_o, or where the weights live on the device only, W_o downloaded once per layer.
// - decode selectors that describe themselves as generic device operations
//   (DecodeSelector::device_selection, engine/device_selection.h);
// - ART (kind E) with the kernel's 64-entry blocks, no oracle mode;
// - decode-time evictions that describe themselves as generic device operations
//   (DecodeEvictionPolicy::device_eviction, engine/device_eviction.h: H2O real-drop, TOVA, CAKE's
//   decode switch), alone (not beside a selector or ART); the device then holds their state.
// The started sequences (start_decode's, a contiguous range) decode under the same decode-time
// method (generate_cells groups cells so), whether they step together or one after another; the
// other sequences (the prefilled prompt they were forked from, another group's cells) are left as
// they are.
// ART's walk counts of a cell are those of the steps from its first to its last: the batch's when
// its cells step together, its own when each decodes alone.
#pragma once

#include <memory>
#include <vector>

#include "engine/cuda/cuda_engine.h"
#include "engine/engine.h"

namespace kvb {

class CudaBackend final : public Engine {
 public:
  // `weights` must outlive the backend. Host f32 weights are uploaded; weights without layers
  // (LoadOptions::weights_on_host = false) are generated on the device (a preset) or read from
  // the file at weights.source tensor by tensor (CudaEngine::from_source).
  explicit CudaBackend(const ModelWeights& weights);

  const ModelConfig& config() const override { return engine_->config(); }
  std::string backend_name() const override { return "cuda"; }
  const ModelWeights& weights() const override { return weights_; }
  int64_t weight_bytes() const override { return engine_->weight_bytes(); }
  void check_plan(const CachePlan& plan) const override;

  void reserve(int sequences, int capacity) override;
  int max_sequences(int capacity) const override;
  std::vector<float> prefill(int seq, std::span<const TokenId> ids, const CaptureRequest& request,
                             PrefillCapture& capture) override;
  PrefillView prefill_view(int seq, const PrefillCapture& capture, const CaptureRequest& request,
                           KvStore& host_copy) const override;
  KvStore host_store(int seq) const override { return downloaded_store(seq, /*values=*/true); }
  KvStore host_keys(int seq) const override { return downloaded_store(seq, /*values=*/false); }
  void fork(int from, int to) override { engine_->copy_sequence(from, to); }
  void compact(int seq, const KeptIndices& kept, int spare_tokens) override;
  std::vector<TokenId> extend(std::span<const int> sequences, std::span<const TokenId> ids,
                              int first_position) override;
  void start_decode(int seq, CachePlan& plan, int prompt_tokens, int budget_tokens) override;
  void prepare_decode() override;
  std::vector<TokenId> decode(std::span<const DecodeInput> inputs) override;
  void finish_decode(int seq) override;
  int64_t kv_bytes(int seq) const override;
  int64_t peak_memory_bytes() const override { return engine_->device_peak_bytes(); }
  void reset_peak_memory() override { engine_->reset_peak_bytes(); }

  CudaEngine& device() { return *engine_; }

 private:
  // One greedy step of the sequences from the lowest input's to the highest's (CudaEngine's
  // sub-batch step, graph-captured per range): `inputs` feed their sequences; a sequence of the
  // range without an input (one that stopped between two that go on) is fed a filler token whose
  // result is never read. Returns the next token of each input, in input order.
  std::vector<int32_t> step(std::span<const DecodeInput> inputs);
  // Sets the batch's decode-time method (selection, ART) from the started plans.
  void configure_decode();
  // Sequence `seq` (whose heads hold equal lengths) downloaded into a host store, with its values
  // or keys only.
  KvStore downloaded_store(int seq, bool values) const;

  // The weights a prefill view exposes W_o from: the host weights, or for weights
  // that live on the device only, each layer's W_o downloaded once (f32, d_model * Hq*d per layer:
  // 2.1 GB for an 8B model) on the first request.
  const ModelWeights& weights_with_output_projection() const;

  const ModelWeights& weights_;
  std::unique_ptr<CudaEngine> engine_;
  mutable std::unique_ptr<ModelWeights> output_projections_;
  struct Started {
    CachePlan* plan = nullptr;
    int budget_tokens = 0;
    bool stepped = false;                      // a decode step has computed the sequence
    CudaEngine::EarlyExitCounts walks_before;  // ART's counts before its first step
  };
  std::vector<Started> started_;
  bool decode_configured_ = false;
};

}  // namespace kvb
