// The CPU forward pass (Llama family: RMSNorm, RoPE, GQA, SwiGLU, optional QKV bias, tied
// embeddings), activations in f32, weight matrices as loaded (GGUF blocks, f16, bf16 or f32).
// Prefill multiplies the whole chunk with OpenBLAS sgemm (on dequantised tiles of encoded
// weights); decode uses TBB-threaded matrix-vector products on the stored blocks
// (kernels/cpu/quantized_matmul.h); attention is threaded over heads (kernels/cpu/attention.h).
// The KV cache is f32, f16 or bf16 (engine/kv_store.h): decode attention reads 16-bit rows as they
// are, prefill attention widens a layer's rows into a scratch buffer for its sgemms.
// ForwardPrecision::kBf16Device rounds weights and activations where the CUDA engine holds them in
// bf16 (engine/cpu/device_numerics.h lists the points).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/cpu/device_numerics.h"
#include "engine/engine.h"
#include "engine/weights.h"
#include "kernels/cpu/rope.h"

namespace kvb {

class CpuEngine final : public InferenceEngine {
 public:
  // `weights` must outlive the engine. `kv_dtype`: the element type of the caches it makes (f32,
  // the reference, unless asked). `precision` kBf16Device computes on a bf16 copy of the weights
  // (weights() returns it) and stores bf16 keys and values, which an f32 or bf16 cache holds
  // exactly; an f16 cache would round them again (InputError).
  explicit CpuEngine(const ModelWeights& weights, KvDtype kv_dtype = KvDtype::kF32,
                     ForwardPrecision precision = ForwardPrecision::kF32);

  const ModelConfig& config() const override { return weights_.config; }
  std::string backend_name() const override { return "cpu"; }
  const ModelWeights& weights() const override { return weights_; }
  KvDtype kv_dtype() const override { return kv_dtype_; }
  ForwardPrecision precision() const { return precision_; }

  std::vector<float> forward_chunk(std::span<const TokenId> ids, KvStore& store,
                                   const CaptureRequest& request, PrefillCapture* capture,
                                   int start_position = -1) override;
  std::vector<float> decode_step(TokenId token, int position, int step, KvStore& store,
                                 CachePlan& plan) override;

  // Teacher forcing, for a layer-aligned comparison with another backend: while set, layer l of
  // every forward_chunk starts from the rows of its chunk's positions in inputs[l] ([positions,
  // d_model]: a PrefillCapture's layer_inputs, CaptureRequest::layer_inputs) in place of the
  // previous layer's output. Each layer's keys, values and statistics then differ from the other
  // backend's by that layer's own arithmetic, not by the drift of the layers before it. nullptr:
  // the free-running forward. `inputs` must outlive its use.
  void force_layer_inputs(const std::vector<std::vector<float>>* inputs) {
    forced_inputs_ = inputs;
  }

 private:
  struct DecodeScratch;
  void check_token(TokenId id) const;
  void check_context(int first_position, int n_tokens) const;
  void feed_forward_rows(const LayerWeights& layer, int rows, std::vector<float>& x) const;
  void feed_forward_chunk(const LayerWeights& layer, int rows, float* x) const;
  std::vector<float> output_logits(const float* hidden) const;
  // x (the chunk's T rows from position p0) becomes layer `layer`'s forced input rows.
  void take_forced_input(int layer, int p0, int T, std::vector<float>& x) const;
  // Under kBf16Device: x[0, n) rounded to bf16, where the CUDA engine stores a bf16 buffer.
  void round_as_device(float* x, size_t n) const;
  void round_as_device(std::vector<float>& x) const { round_as_device(x.data(), x.size()); }
  // The bias the q/k/v products add: none under kBf16Device, where rotate_qkv adds it to the
  // rounded product as the device does.
  const float* product_bias(const std::vector<float>& bias) const;
  // After the q/k/v products of `rows` rows at positions first_position + t: under kBf16Device the
  // products' rounding and the bias; RoPE; under kBf16Device the rotated values' rounding.
  void rotate_qkv(const LayerWeights& layer, int rows, int first_position, float* q, float* k,
                  float* v) const;
  // Attention of one query head at one decode step: the single place where the decode path
  // chooses how a head attends (dense, a selection, or a kernel-level walk such as ART).
  void attend_query_head(int layer, int q_head, const float* query, const KvStore& store,
                         const Selection* selection, const CachePlan& plan, float* output,
                         float* probabilities) const;
  // ART (kind E): the early-exit walk of KV head `kv_head`'s query-head group. Adds the walk's
  // blocks (and, in oracle mode, its probe/oracle comparison) to `stats` / `oracle`.
  void attend_group_early_exit(int layer, int kv_head, const float* queries, const KvStore& store,
                               const Selection* selection, const EarlyExitParams& params,
                               float* outputs, std::vector<std::vector<float>>& probabilities,
                               kernels::EarlyExitWalkStats& stats,
                               kernels::EarlyExitOracleSummary& oracle) const;

  ForwardPrecision precision_;
  std::unique_ptr<const ModelWeights> rounded_weights_;  // kBf16Device: the weights as bf16
  const ModelWeights& weights_;                          // the caller's, or *rounded_weights_
  KvDtype kv_dtype_;
  std::vector<float> inv_freq_;
  kernels::RopePairing rope_pairing_;
  const std::vector<std::vector<float>>* forced_inputs_ = nullptr;
};

}  // namespace kvb
