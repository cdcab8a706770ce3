// DropKV (seed 000) — kind A, prefill eviction by the exact single-token output perturbation.
//
//   evicting j alone moves query a's output by  Δ_a^(t)(j) = (p/(1−p))² ‖a_a^(t) − v_j‖²
//   score_h[j] = (1/g) Σ_{a∈group(h)} Σ_{t<W} ω_{a,j}^(t) ‖a_a^(t) − v_j‖²,  ω = (p/(1 − p + 1e−6))²
//   (rows t = window queries, each seeing keys j ≤ L−W+t; softmax over all of them)
//   pool over the FULL length (kernel 11, window positions included, so their raw scores spill into
//   neighbouring prefix tokens), then the last w positions are set to max + 1 (protected);
//   keep_len = max(budget, w, 1) per (layer, KV head), window included; keep the top keep_len.
//
// Source: AozhongZhang/DropKV @67cdfeb — `patches/dropkv_transformers.patch` (path P, max_pool1d,
// what run_eval.sh and the paper's results use) and `dropkv_cache.py` (path S, avg_pool1d);
// Triton scorer `dropkv_triton.py` (specs/methods.md §9). Defaults: w = 8, kernel 11, pooling max
// (path P), precision "bf16" = match_pytorch_precision (Triton path: bf16 q·k with fp32
// accumulation ×1/√d, fp32 LSE, a from the unrounded fp32 p rounded to bf16, p rounded to bf16 before
// ω, ⟨a,v⟩ with bf16 inputs, squared distance clamped at 0); "fp32" = dropkv_scores_reference.
// No dense layers, no sinks; uniform budget over layers and heads.
#include <algorithm>
#include <cmath>
#include <limits>

#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

// Adds query head a's score over its W window rows into `scores` (length L).
void add_query_head_scores(const LayerPrefillView& layer, int a, int window, Precision precision,
                           std::vector<double>& scores) {
  const int length = layer.length, d = layer.head_dim;
  const int h = a / layer.group_size();
  const bool bf16 = precision == Precision::kBf16;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // bf16 copies of the head's keys and values (the model's dtype in the reference).
  const float* keys = layer.keys[h];
  const float* values = layer.values[h];
  std::vector<float> value_norms(length);
  for (int j = 0; j < length; ++j) {
    float squared = 0.0f;
    for (int i = 0; i < d; ++i) {
      const float v = maybe_bf16(values[int64_t(j) * d + i], precision);
      squared += v * v;
    }
    value_norms[j] = squared;
  }
  std::vector<float> logits(length), query(d), output(d);
  for (int t = 0; t < window; ++t) {
    const float* q = layer.query(a, layer.window - window + t);
    for (int i = 0; i < d; ++i) query[i] = maybe_bf16(q[i], precision);
    const int visible = length - window + t + 1;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < visible; ++j) {
      float dot = 0.0f;
      for (int i = 0; i < d; ++i) dot += query[i] * maybe_bf16(keys[int64_t(j) * d + i], precision);
      logits[j] = dot * scale;
      max_logit = std::max(max_logit, logits[j]);
    }
    float total = 0.0f;
    for (int j = 0; j < visible; ++j) total += std::exp(logits[j] - max_logit);
    const float log_sum = max_logit + std::log(total);
    // True output a from the unrounded fp32 probabilities.
    std::fill(output.begin(), output.end(), 0.0f);
    for (int j = 0; j < visible; ++j) {
      const float p = std::exp(logits[j] - log_sum);
      for (int i = 0; i < d; ++i) output[i] += p * maybe_bf16(values[int64_t(j) * d + i], precision);
    }
    float output_norm = 0.0f;
    for (int i = 0; i < d; ++i) {
      output[i] = maybe_bf16(output[i], precision);
      output_norm += output[i] * output[i];
    }
    for (int j = 0; j < visible; ++j) {
      float p = std::clamp(std::exp(logits[j] - log_sum), 0.0f, 1.0f);
      p = maybe_bf16(p, precision);
      const float ratio = p / (1.0f - p + 1e-6f);
      const float* v = values + int64_t(j) * d;
      float distance;
      if (bf16) {
        float dot = 0.0f;
        for (int i = 0; i < d; ++i) dot += output[i] * round_bf16(v[i]);
        distance = std::max(0.0f, value_norms[j] - 2.0f * dot + output_norm);
      } else {
        distance = 0.0f;
        for (int i = 0; i < d; ++i) distance += (output[i] - v[i]) * (output[i] - v[i]);
      }
      scores[j] += static_cast<double>(ratio * ratio * distance);
    }
  }
}

class DropKvPolicy : public ScoredPolicy {
 public:
  DropKvPolicy(ScoredSettings settings, int kernel, Pooling pooling, Precision precision)
      : ScoredPolicy(std::move(settings)), kernel_(kernel), pooling_(pooling), precision_(precision) {}

  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    const int window = effective_window(layer, settings().window);
    const int group = layer.group_size();
    std::vector<std::vector<float>> scores(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h) {
      std::vector<double> sum(layer.length, 0.0);
      for (int a = h * group; a < (h + 1) * group; ++a)
        add_query_head_scores(layer, a, window, precision_, sum);
      std::vector<float> mean(layer.length);
      for (int j = 0; j < layer.length; ++j) mean[j] = static_cast<float>(sum[j] / group);
      // Pooling over the full length (fp32 scores; no bf16 rounding of the pooled values).
      scores[h] = pool1d(mean, kernel_, pooling_, Precision::kFp32);
    }
    return scores;
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
          {"dense_layers", nlohmann::json::array()}};
}

std::shared_ptr<const ScoredPolicy> build_dropkv(const PolicyParams& params) {
  ScoredSettings settings = read_scored_settings(params, PolicyKind::kPrefillQueryAware);
  return std::make_shared<DropKvPolicy>(
      settings, params.integer("kernel"), parse_pooling(params.choice("pooling", {"avg", "max"})),
      parse_precision(params.choice("precision", {"bf16", "fp32"})));
}

PolicyFactory dropkv_factory() {
  return scored_factory({"dropkv", PolicyKind::kPrefillQueryAware,
                         "exact single-token output perturbation (p/(1-p))^2 ||a - v||^2",
                         "AozhongZhang/DropKV@67cdfeb dropkv_transformers.patch, dropkv_triton.py",
                         dropkv_defaults()},
                        build_dropkv);
}

}  // namespace kvb
