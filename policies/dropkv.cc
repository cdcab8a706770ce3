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
// Triton scorer `dropkv_triton.py` (docs/methods.md §9). Defaults: w = 8, kernel 11, pooling max
// (path P), precision "bf16" = match_pytorch_precision (Triton path: bf16 q·k with fp32
// accumulation ×1/√d, fp32 LSE, a from the unrounded fp32 p rounded to bf16, p rounded to bf16 before
// ω, ⟨a,v⟩ with bf16 inputs, squared distance clamped at 0); "fp32" = dropkv_scores_reference.
// No dense layers, no sinks; uniform budget over layers and heads.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

// The head's keys and values as the scorer reads them: bf16-rounded copies in bf16 mode.
struct HeadTensors {
  std::vector<float> keys, values, value_norms;  // [L, d], [L, d], [L]
};

HeadTensors head_tensors(const LayerPrefillView& layer, int h, Precision precision) {
  const size_t n = static_cast<size_t>(layer.length) * layer.head_dim;
  HeadTensors out{{layer.keys[h], layer.keys[h] + n}, {layer.values[h], layer.values[h] + n}, {}};
  for (auto& x : out.keys) x = maybe_bf16(x, precision);
  for (auto& x : out.values) x = maybe_bf16(x, precision);
  out.value_norms.resize(layer.length);
  for (int j = 0; j < layer.length; ++j) {
    float squared = 0.0f;
    for (int i = 0; i < layer.head_dim; ++i) squared += out.values[size_t(j) * layer.head_dim + i] *
                                                        out.values[size_t(j) * layer.head_dim + i];
    out.value_norms[j] = squared;
  }
  return out;
}

// Adds query head a's score over its W window rows into `scores` (length L).
void add_query_head_scores(const LayerPrefillView& layer, int a, const HeadTensors& head, int window,
                           Precision precision, std::vector<double>& scores) {
  const int length = layer.length, d = layer.head_dim;
  const bool bf16 = precision == Precision::kBf16;
  std::vector<float> queries(static_cast<size_t>(window) * d);
  std::copy_n(layer.query(a, layer.window - window), queries.size(), queries.begin());
  for (auto& x : queries) x = maybe_bf16(x, precision);
  // logits [W, L] = q·k (fp32 accumulation) / sqrt(d), then p = exp(logit − LSE) in fp32.
  std::vector<float> probs(static_cast<size_t>(window) * length);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, window, length, d,
              1.0f / std::sqrt(static_cast<float>(d)), queries.data(), d, head.keys.data(), d, 0.0f,
              probs.data(), length);
  for (int t = 0; t < window; ++t) {
    float* row = &probs[static_cast<size_t>(t) * length];
    const int visible = length - window + t + 1;
    const float max_logit = *std::max_element(row, row + visible);
    float total = 0.0f;
    for (int j = 0; j < visible; ++j) total += std::exp(row[j] - max_logit);
    const float log_sum = max_logit + std::log(total);
    for (int j = 0; j < visible; ++j) row[j] = std::clamp(std::exp(row[j] - log_sum), 0.0f, 1.0f);
    std::fill(row + visible, row + length, 0.0f);
  }
  // True outputs a [W, d] from the unrounded fp32 probabilities (stored as bf16 in bf16 mode).
  std::vector<float> outputs(static_cast<size_t>(window) * d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, window, d, length, 1.0f, probs.data(),
              length, head.values.data(), d, 0.0f, outputs.data(), d);
  for (auto& x : outputs) x = maybe_bf16(x, precision);
  // bf16 (Triton) path: ||a − v||² = ||v||² − 2⟨a, v⟩ + ||a||², clamped at 0.
  std::vector<float> dots;
  if (bf16) {
    dots.resize(static_cast<size_t>(window) * length);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, window, length, d, 1.0f, outputs.data(), d,
                head.values.data(), d, 0.0f, dots.data(), length);
  }
  for (int t = 0; t < window; ++t) {
    const float* output = &outputs[static_cast<size_t>(t) * d];
    float output_norm = 0.0f;
    for (int i = 0; i < d; ++i) output_norm += output[i] * output[i];
    const int visible = length - window + t + 1;
    for (int j = 0; j < visible; ++j) {
      const float p = maybe_bf16(probs[static_cast<size_t>(t) * length + j], precision);
      const float ratio = p / (1.0f - p + 1e-6f);
      float distance;
      if (bf16) {
        distance = std::max(0.0f, head.value_norms[j] -
                                      2.0f * dots[static_cast<size_t>(t) * length + j] + output_norm);
      } else {
        const float* v = &head.values[static_cast<size_t>(j) * d];
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
    // Scores a device backend computed with the same formula (kernels/cuda/dropkv_scores.h).
    if (const float* raw = layer.perturbation_for(perturbation_request(settings().window))) {
      for (int h = 0; h < layer.n_kv_heads; ++h)
        scores[h] = pool1d(
            {raw + static_cast<int64_t>(h) * layer.length, static_cast<size_t>(layer.length)},
            kernel_, pooling_, Precision::kFp32);
      return scores;
    }
    require_keys_values(layer, "dropkv", "its perturbation scores");
    for (int h = 0; h < layer.n_kv_heads; ++h) {
      std::vector<double> sum(layer.length, 0.0);
      const HeadTensors head = head_tensors(layer, h, precision_);
      for (int a = h * group; a < (h + 1) * group; ++a)
        add_query_head_scores(layer, a, head, window, precision_, sum);
      std::vector<float> mean(layer.length);
      for (int j = 0; j < layer.length; ++j) mean[j] = static_cast<float>(sum[j] / group);
      // Pooling over the full length (fp32 scores; no bf16 rounding of the pooled values).
      scores[h] = pool1d(mean, kernel_, pooling_, Precision::kFp32);
    }
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
