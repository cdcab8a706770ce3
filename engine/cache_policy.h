// The cache-policy interface the engine defines over its KvStore. Methods live in policies/ and
// implement one of these; the engine calls them and never names a method.
//
// Kinds (docs/methods.md §0):
//   A prefill eviction, query-aware     -> PrefillPolicy (uses window queries)
//   B prefill eviction, query-agnostic  -> PrefillPolicy (keys / values / positions only)
//   C decode-time eviction              -> DecodeEvictionPolicy
//   D decode-time dynamic selection     -> DecodeSelector (the whole cache stays resident)
//   E kernel-level early termination    -> EarlyExitParams handed to the decode attention kernel
// A CachePlan bundles what one run uses; "snapkv+art" is a PrefillPolicy plus EarlyExitParams.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device_eviction.h"
#include "engine/device_selection.h"
#include "engine/kv_store.h"
#include "engine/model_config.h"
#include "kernels/cpu/early_exit_decode.h"

namespace kvb {

enum class PolicyKind : char {
  kPrefillQueryAware = 'A',
  kPrefillQueryAgnostic = 'B',
  kDecodeEviction = 'C',
  kDecodeSelection = 'D',
  kKernelWalk = 'E',
};

// A budget is an absolute token count per (layer, KV head) or a fraction of the prompt length.
struct Budget {
  enum class Unit { kTokens, kFraction };
  Unit unit = Unit::kTokens;
  double value = 0;

  // "512" -> 512 tokens; "5%" or "0.05" -> fraction. Throws InputError for <= 0 or garbage.
  static Budget parse(const std::string& text);
  // int(r * L) for fractions (truncation, as kvpress and DropKV do); the count itself otherwise.
  int tokens_for(int prompt_length) const;
  std::string to_string() const;  // "512" or "5%"
};

// The output-perturbation scores of a window (engine/prefill_capture.h) with the rounding of p.
struct PerturbationRequest {
  int window = 0;
  bool round_p_to_bf16 = true;
  bool operator==(const PerturbationRequest&) const = default;
  auto operator<=>(const PerturbationRequest&) const = default;
};

// The window attention sums of a window (engine/prefill_capture.h), in plain fp32 or with the casts
// of the bf16 reference implementations (kernels/cpu/window_attention_sums.h).
struct WindowSumsRequest {
  int window = 0;
  bool reference_bf16_casts = false;
  bool operator==(const WindowSumsRequest&) const = default;
  auto operator<=>(const WindowSumsRequest&) const = default;
};

// What the prefill observers must capture for the active policies. Observers capture nothing that
// no policy asked for.
//
// The statistics below are what a device backend computes beside the prefill so that only O(L)
// numbers per head leave the device; a backend that holds the cache in host memory (the CPU) may
// leave them out, and the policy then computes the same from the keys and values it reads there.
// A policy whose scoring needs more than its statistics sets `host_keys_values`: a device backend
// then copies the prompt's keys and values to the host for it.
struct CaptureRequest {
  int window_queries = 0;              // last w post-RoPE queries of every query head
  bool attention_column_sums = false;  // Σ over all prompt queries of p(query -> key) (H2O)
  bool output_projection = false;      // expose W_o (CriticalKV)
  // Windows w for which Σ_{t<w} p(window query t -> key j) is wanted, per query head; a prefill
  // serving cells of both precisions computes both statistics.
  std::vector<WindowSumsRequest> window_attention_sums;
  // Windows for Σ_t ω(p)·‖y_t − v_j‖² (kernels/cpu/dropkv_scores.h), per KV head.
  std::vector<PerturbationRequest> output_perturbations;
  bool key_norms = false;  // ‖k_j‖₂ per KV head
  // (1/g) Σ_{a∈group} ‖v_j W_o^a‖₁ per KV head (CriticalKV); where the backend leaves it out, the
  // view exposes W_o and the values for the policy to compute it.
  bool projected_value_norms = false;
  bool host_keys_values = false;  // the policy reads the prompt's keys and values themselves
  // The f32 residual stream entering each layer (layer 0: the embeddings), n_layers x L x d_model
  // floats on the host. No policy reads it: a comparison of two backends forces one's layer inputs
  // into the other (CpuEngine::force_layer_inputs), so that each layer's results differ by that
  // layer's arithmetic alone.
  bool layer_inputs = false;
  void merge(const CaptureRequest& other);
};

// One layer after its full-attention prefill. Every KV head holds the whole prompt (L tokens).
struct LayerPrefillView {
  int layer = 0;
  int length = 0;  // L
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int d_model = 0;
  int window = 0;                            // captured window queries w (positions L-w .. L-1)
  const float* query_window = nullptr;       // [Hq, w, d], post-RoPE
  std::vector<const float*> keys;            // per KV head [L, d], post-RoPE
  std::vector<const float*> values;          // per KV head [L, d]
  const float* column_sums = nullptr;        // [Hq, L] or nullptr
  const float* output_projection = nullptr;  // [d_model, Hq*d] row-major (out x in) or nullptr
  // Owns what output_projection points at when the weights are not f32 (shared by view copies).
  std::shared_ptr<const std::vector<float>> output_projection_storage;
  // Device statistics (CaptureRequest), each present only where the backend computed it.
  struct WindowSums {
    WindowSumsRequest request;    // as requested; the sums cover min(window, L) queries
    const float* sums = nullptr;  // [Hq, L]
  };
  std::vector<WindowSums> window_attention_sums;
  struct Perturbation {
    PerturbationRequest request;
    const float* scores = nullptr;  // [Hkv, L], the group mean, before pooling
  };
  std::vector<Perturbation> output_perturbations;
  const float* key_norms = nullptr;              // [Hkv, L]
  const float* projected_value_norms = nullptr;  // [Hkv, L]

  int group_size() const { return n_query_heads / n_kv_heads; }
  // Whether the view holds the prompt's keys and values (always on the CPU; on a device only for
  // a request with host_keys_values).
  bool has_keys_values() const { return !keys.empty(); }
  // The statistic for this request, or nullptr when the backend did not compute it.
  const float* window_sums_for(const WindowSumsRequest& request) const;
  const float* perturbation_for(const PerturbationRequest& request) const;
  const float* query(int q_head, int t) const {
    return query_window + (static_cast<int64_t>(q_head) * window + t) * head_dim;
  }
};

struct PrefillView {
  std::vector<LayerPrefillView> layers;
  int prompt_length() const { return layers.empty() ? 0 : layers[0].length; }
};

// kept[layer][kv_head] = strictly increasing indices into the prompt.
using KeptIndices = std::vector<std::vector<std::vector<int32_t>>>;

class PrefillPolicy {
 public:
  virtual ~PrefillPolicy() = default;
  virtual std::string name() const = 0;
  virtual PolicyKind kind() const = 0;
  virtual CaptureRequest capture() const = 0;
  // Chooses kept entries for every (layer, KV head) at `budget_tokens` per head on average.
  virtual KeptIndices select(const PrefillView& view, int budget_tokens) const = 0;
  // False for methods that evict during prefill (CAKE's cascading, chunked prefill): the sweep
  // runner then runs them on their own instead of replaying a shared full-prefill snapshot.
  virtual bool replays_full_prefill() const { return true; }
};

// Kind C: called after every decode step of every layer, once the new token was appended.
struct DecodeStepView {
  int layer = 0;
  int step = 0;                  // 0 for the first generated token
  const float* query = nullptr;  // [Hq, d], post-RoPE
  // probabilities[a] = attention of query head a over its KV head's entries (store order).
  std::vector<const float*> probabilities;
};

class DecodeEvictionPolicy {
 public:
  virtual ~DecodeEvictionPolicy() = default;
  virtual std::string name() const = 0;
  // Called once after prefill compaction, before the first decode step.
  virtual void start(const KvStore& store, int prompt_length, int budget_tokens) = 0;
  virtual void after_step(const DecodeStepView& step, KvStore& store) = 0;

  // The same eviction in a device engine's decode step, as the generic operations it is built from
  // (engine/device_eviction.h: a statistic of the step's attention, a per-layer keep count,
  // protected sinks and recent entries), for a model of `n_layers` layers at `budget_tokens`, from
  // the state the prefill selection left (layer budgets, accumulated scores). It replaces start():
  // the device then holds the state. nullopt: the eviction runs on the CPU engine only;
  // runs_on_device() says the same without a budget (a backend's plan check).
  virtual bool runs_on_device() const { return false; }
  virtual std::optional<DeviceEvictionSpec> device_eviction(int /*n_layers*/,
                                                            int /*budget_tokens*/) const {
    return std::nullopt;
  }
};

// Kind D: which entries each query head attends to at one decode step.
struct Selection {
  // indices[a] = indices into the store sequence of query head a's KV head (any order).
  std::vector<std::vector<int32_t>> indices;
  // Optional per-index additive logit correction (importance weights of a sampled set); empty if
  // none.
  std::vector<std::vector<float>> logit_bias;
  bool dense = false;  // this layer attends to everything (dense layers)
};

class DecodeSelector {
 public:
  virtual ~DecodeSelector() = default;
  virtual std::string name() const = 0;
  // select() receives `out` with `indices` sized to the model's query-head count.
  // Builds per-layer metadata (hash codes, page bounds, ...) from the cache after prefill.
  virtual void start(const KvStore& store, int prompt_length, int budget_tokens) = 0;
  // Keeps metadata current after a decode token's K/V were appended to `layer`.
  virtual void on_append(const KvStore& store, int layer) = 0;
  virtual void select(int layer, const float* query /*[Hq, d]*/, const KvStore& store,
                      Selection& out) = 0;

  // The same selection in a device engine's decode step, as the generic operations it is built
  // from (engine/device_selection.h: scores, top-k, gathered attention) with this selector's
  // parameters, for a model of shape `model` at `budget_tokens`: whatever reads the prompt's
  // cache runs on the device. nullopt: the selector runs on the CPU engine only; runs_on_device()
  // says the same without a model (a backend's plan check).
  virtual bool runs_on_device() const { return false; }
  virtual std::optional<DeviceSelectionSpec> device_selection(const ModelConfig& /*model*/,
                                                              int /*budget_tokens*/) const {
    return std::nullopt;
  }
};

// Kind E (ART): the decode attention walks KV blocks (sink block first, then most recent
// backwards) and stops once the running output is stable for `patience` blocks.
struct EarlyExitParams {
  float tau = 1e-5f;  // bound on d_scale
  float phi = 1e-3f;  // bound on d_direction = 1 - cos(o_b, o_{b-1})
  int patience = 2;
  int block_size = 64;  // KV tile
  int sink_tokens = 4;  // size of the first block walked
  std::string scale_criterion = "norm";  // "mass" (ΔZ/Z), "norm" (|Δ‖o‖|/‖o‖), "change" (‖Δo‖/‖o‖)
  bool use_scale = true;      // false: the ablation without d_scale
  bool use_direction = true;  // false: the ablation without d_direction
  bool per_head = false;      // true: each query head stops on its own (else the KV group together)
  // > 0: a cap — stops only after walk blocks 0 .. decision_window-1, on the CPU and the GPU alike;
  // 0: anywhere (the method). Both engines decide over the whole walk.
  int decision_window = 0;
  bool enabled = true;  // false: same walk, no termination (overhead measurement)
  // > 0: oracle mode. Every walk is also traced without stopping and compared with the true
  // relative error of the running output; CachePlan::early_exit_oracle counts how often the probe
  // stopped before that error fell under this tolerance (ART Table 4). Slow; 0 = off.
  float oracle_tolerance = 0;
  // Optional, CPU engine only (kvbench art-trace): called before every decode walk with the layer,
  // the KV head (dense walks) or query head (selections) and the walk's inputs; it may run
  // concurrently for different heads.
  std::function<void(int layer, int head, const kernels::EarlyExitDecodeArgs& args)> observer;
};

// What one generation run uses. Any member may be empty; Full KV is an empty plan.
struct CachePlan {
  std::string label;  // canonical policy string, e.g. "snapkv+art"
  std::shared_ptr<const PrefillPolicy> prefill;
  std::shared_ptr<DecodeEvictionPolicy> decode_eviction;
  std::shared_ptr<DecodeSelector> selector;
  std::optional<EarlyExitParams> early_exit;
  std::optional<Budget> budget;
  // Filled by the engine's decode steps while `early_exit` is set (generation resets them per run):
  // KV blocks walked / present (the skipped fraction), and the oracle comparison in oracle mode.
  kernels::EarlyExitWalkStats early_exit_stats;
  kernels::EarlyExitOracleSummary early_exit_oracle;
};

// Whether the plan's decode reads the cache through float pointers (KvStore::keys(), values()): a
// decode selector, and ART's walk. A 16-bit store is widened for such a plan (engine/kv_store.h),
// so that they read exactly its rounded values; its entries count 4 bytes from then on.
bool decode_reads_f32_rows(const CachePlan& plan);

// Before the first decode step: widens `store` where the plan needs it (else narrows it back to
// its dtype, if the prefill policies' view had widened it), then starts the plan's decode
// eviction and decode selector on it.
void start_decode_policies(CachePlan& plan, KvStore& store, int prompt_tokens, int budget_tokens);

}  // namespace kvb
