// DropKV (seed 000) — kind A, prefill eviction by the exact single-token output perturbation.
//
//   evicting j alone moves query a's output by  Δ_a^(t)(j) = (p/(1−p))² ‖a_a^(t) − v_j‖²
//   score_h[j] = (1/g) Σ_{a∈group(h)} Σ_{t<W} ω_{a,j}^(t) ‖a_a^(t) − v_j‖²,  ω = (p/(1 − p +
//   1e−6))² (rows t = window queries, each seeing keys j ≤ L−W+t; softmax over all of them) pool
//   over the FULL length (kernel 11, window positions included, so their raw scores spill into
//   neighbouring prefix tokens), then the last w positions are set to max + 1 (protected);
//   keep_len = max(budget, w, 1) per (layer, KV head), window included; keep the top keep_len.
//
// Source: AozhongZhang/DropKV @67cdfeb — `patches/dropkv_transformers.patch` (path P, max_pool1d,
// what run_eval.sh and the paper's results use) and `dropkv_cache.py` (path S, avg_pool1d);
// Triton scorer `dropkv_triton.py` (docs/methods.md §9). Defaults: w = 8, kernel 11, pooling max
// (path P), precision "bf16" = match_pytorch_precision (Triton path: bf16 q·k with fp32
// accumulation ×1/√d, fp32 LSE, a from the unrounded fp32 p rounded to bf16, p rounded to bf16
// before ω, ⟨a,v⟩ with bf16 inputs, squared distance clamped at 0); "fp32" =
// dropkv_scores_reference. No dense layers, no sinks; uniform budget over layers and heads.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropkv_scores.h"
#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

// Copies of n floats, bf16-rounded in bf16 mode (the Triton scorer reads bf16 q, k, v).
std::vector<float> copy_at(const float* x, size_t n, Precision precision) {
  std::vector<float> out(x, x + n);
  for (auto& value : out) value = maybe_bf16(value, precision);
  return out;
}

// Raw scores [Hkv, L] computed as a device computes them: the window forward over the last W
// queries (kernels/cpu/attention.h, the twin of prefill_attention), then the scorer
// (kernels/cpu/dropkv_scores.h, the twin of the fused CUDA scorer).
std::vector<float> raw_scores(const LayerPrefillView& layer, int window, Precision precision) {
  const int length = layer.length, d = layer.head_dim;
  const int hq = layer.n_query_heads, hkv = layer.n_kv_heads;
  const size_t head_size = static_cast<size_t>(length) * d;
  std::vector<float> keys, values;  // [Hkv, L, d]
  for (int h = 0; h < hkv; ++h) {
    const std::vector<float> k = copy_at(layer.keys[h], head_size, precision);
    const std::vector<float> v = copy_at(layer.values[h], head_size, precision);
    keys.insert(keys.end(), k.begin(), k.end());
    values.insert(values.end(), v.begin(), v.end());
  }
  // The window queries as the forward takes them ([W, Hq·d]) and as the scorer does ([Hq, W, d]).
  std::vector<float> query_rows(static_cast<size_t>(window) * hq * d), queries(query_rows.size());
  for (int a = 0; a < hq; ++a)
    for (int t = 0; t < window; ++t) {
      const std::vector<float> q = copy_at(layer.query(a, layer.window - window + t), d, precision);
      std::copy(q.begin(), q.end(), &query_rows[(static_cast<size_t>(t) * hq + a) * d]);
      std::copy(q.begin(), q.end(), &queries[(static_cast<size_t>(a) * window + t) * d]);
    }
  std::vector<float> output_rows(query_rows.size()), lse(static_cast<size_t>(hq) * window);
  kernels::PrefillAttentionArgs forward;
  forward.n_query_heads = hq;
  forward.n_kv_heads = hkv;
  forward.head_dim = d;
  forward.n_queries = window;
  forward.queries = query_rows.data();
  for (int h = 0; h < hkv; ++h) {
    forward.keys.push_back(&keys[h * head_size]);
    forward.values.push_back(&values[h * head_size]);
  }
  forward.prefix.assign(hkv, length - window);
  forward.output = output_rows.data();
  forward.row_log_sum_exp = lse.data();
  kernels::prefill_attention(forward);
  // y [Hq, W, d], stored as bf16 in bf16 mode (from the unrounded fp32 probabilities).
  std::vector<float> outputs(output_rows.size());
  for (int a = 0; a < hq; ++a)
    for (int t = 0; t < window; ++t)
      for (int i = 0; i < d; ++i)
        outputs[(static_cast<size_t>(a) * window + t) * d + i] =
            maybe_bf16(output_rows[(static_cast<size_t>(t) * hq + a) * d + i], precision);
  std::vector<float> scores(static_cast<size_t>(hkv) * length);
  kernels::dropkv_scores({.n_query_heads = hq,
                          .n_kv_heads = hkv,
                          .head_dim = d,
                          .length = length,
                          .window = window,
                          .queries = queries.data(),
                          .outputs = outputs.data(),
                          .lse = lse.data(),
                          .keys = keys.data(),
                          .values = values.data(),
                          .round_p_to_bf16 = precision == Precision::kBf16,
                          .scores = scores.data(),
                          .direct_distance = precision == Precision::kFp32});
  return scores;
}

class DropKvPolicy : public ScoredPolicy {
 public:
  DropKvPolicy(ScoredSettings settings, int kernel, Pooling pooling, Precision precision)
      : ScoredPolicy(std::move(settings)),
        kernel_(kernel),
        pooling_(pooling),
        precision_(precision) {}

  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    // Scores a device backend computed (kernels/cuda/dropkv_scores.h), or the same computation on
    // the host from the prompt's keys and values.
    std::vector<float> computed;
    const float* raw = layer.perturbation_for(perturbation_request(settings().window));
    if (!raw) {
      require_keys_values(layer, "dropkv", "its perturbation scores");
      computed = raw_scores(layer, effective_window(layer, settings().window), precision_);
      raw = computed.data();
    }
    // Pooling over the full length (fp32 scores; no bf16 rounding of the pooled values).
    std::vector<std::vector<float>> scores(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h)
      scores[h] =
          pool1d({raw + static_cast<int64_t>(h) * layer.length, static_cast<size_t>(layer.length)},
                 kernel_, pooling_, Precision::kFp32);
    return scores;
  }

  PerturbationRequest perturbation_request(int window) const {
    return {window, precision_ == Precision::kBf16};
  }

 private:
  int kernel_;
  Pooling pooling_;
  Precision precision_;
};

}  // namespace

nlohmann::json dropkv_defaults() {
  return {{"window", 8},
          {"kernel", 11},
          {"pooling", "max"},
          {"precision", "bf16"},
          {"dense_layers", nlohmann::json::array()},
          {"budget_includes_window", true}};
}

std::shared_ptr<const ScoredPolicy> build_dropkv(const PolicyParams& params) {
  ScoredSettings settings = read_scored_settings(params, PolicyKind::kPrefillQueryAware);
  const Precision precision = parse_precision(params.choice("precision", {"bf16", "fp32"}));
  // The window queries for the CPU's own scoring, the fused scores in place of the keys on a
  // device.
  settings.capture.host_keys_values = false;
  settings.capture.output_perturbations = {{settings.window, precision == Precision::kBf16}};
  return std::make_shared<DropKvPolicy>(settings, params.integer("kernel"),
                                        parse_pooling(params.choice("pooling", {"avg", "max"})),
                                        precision);
}

PolicyFactory dropkv_factory() {
  return scored_factory({"dropkv", PolicyKind::kPrefillQueryAware,
                         "exact single-token output perturbation (p/(1-p))^2 ||a - v||^2",
                         "AozhongZhang/DropKV@67cdfeb dropkv_transformers.patch, dropkv_triton.py",
                         dropkv_defaults()},
                        build_dropkv);
}

}  // namespace kvb
