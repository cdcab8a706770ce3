// CriticalKV (Feng et al. 2025) — kind A, output-aware two-stage selection around a base scorer.
//
//   ν_j = (1/g) Σ_{a∈group(h)} ‖v_j W_o^a‖₁   (W_o^a: the d×D slice of the output projection that
//                                             query head a feeds; L1 over the hidden dimension)
//   stage 1: keep the top int(C·ρ) tokens by the base score s (the window counts here, as kvpress's
//            SnapKV pads it with the maximum)
//   stage 2: fill up to C with the best of the rest by s' = (s + ε)·ν
//
// Source: kvpress @8bb29b9 `criticalkv_press.py` (contributed by the CriticalKV first author, PR
// #46; docs/methods.md §7). Defaults: ρ = first_stage_ratio = 0.5, ε = 1e−4, base scorer SnapKV
// (its own defaults; "scorer" selects another). Needs ν (CaptureRequest::projected_value_norms:
// computed beside the prefill on a device, from W_o and the values on the CPU).
// Budget C per (layer, KV head), uniform, window included. CriticalAdaKV is in adakv.cc.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/projected_value_norms.h"
#include "policies/methods.h"
#include "policies/selection.h"
#include "policies/wrapped_scorer.h"

namespace kvb {

std::vector<float> projected_value_norms(const LayerPrefillView& layer, int kv_head) {
  const int length = layer.length;
  if (layer.projected_value_norms) {  // computed beside the prefill (a device backend)
    const float* nu = layer.projected_value_norms + static_cast<int64_t>(kv_head) * length;
    return std::vector<float>(nu, nu + length);
  }
  if (!layer.output_projection || !layer.has_keys_values())
    throw InputError(
        "CriticalKV needs ‖v W_o‖ (capture projected_value_norms), or W_o and the values");
  std::vector<float> nu(length);
  kernels::ProjectedValueNormsArgs args;
  args.values = layer.values[kv_head];
  args.output_projection = layer.output_projection;
  args.n_query_heads = layer.n_query_heads;
  args.n_kv_heads = layer.n_kv_heads;
  args.kv_head = kv_head;
  args.length = length;
  args.dim = layer.head_dim;
  args.hidden = layer.d_model;
  args.norms = nu.data();
  kernels::projected_value_norms(args);
  return nu;
}

std::vector<int32_t> critical_top(const std::vector<float>& scores, const std::vector<float>& nu,
                                  int keep, int forced, double epsilon) {
  const int n = static_cast<int>(scores.size());
  keep = std::clamp(keep, 0, n);
  forced = std::clamp(forced, 0, keep);
  std::vector<float> rescored(n);
  for (int j = 0; j < n; ++j) rescored[j] = static_cast<float>((scores[j] + epsilon) * nu[j]);
  for (int32_t j : top_k(scores, forced)) rescored[j] = std::numeric_limits<float>::infinity();
  return top_k_set(rescored, keep);
}

namespace {

class CriticalKvPolicy : public ScoredPolicy {
 public:
  CriticalKvPolicy(std::shared_ptr<const ScoredPolicy> base, double ratio, double epsilon)
      : ScoredPolicy(settings_for(*base)),
        base_(std::move(base)),
        ratio_(ratio),
        epsilon_(epsilon) {}

  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    return base_->score(layer);
  }
  std::vector<int> layer_budgets(const PrefillView& view, int budget_tokens) const override {
    return base_->layer_budgets(view, budget_tokens);
  }

 protected:
  std::vector<std::vector<int32_t>> select_layer(const LayerPrefillView& layer,
                                                 int budget) const override {
    const ProtectedSpan span = protected_span(layer.length, settings().sinks, settings().window);
    const int begin = span.begin(), end = span.end(), protect = span.sinks + span.window;
    const int stage1 = std::max(0, static_cast<int>(budget * ratio_) - protect);
    const auto scores = score(layer);
    std::vector<std::vector<int32_t>> kept(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h) {
      const auto nu = projected_value_norms(layer, h);
      const std::vector<float> s(scores[h].begin() + begin, scores[h].begin() + end);
      const std::vector<float> n(nu.begin() + begin, nu.begin() + end);
      kept[h] = span.kept(critical_top(s, n, std::max(0, budget - protect), stage1, epsilon_));
    }
    return kept;
  }

 private:
  static ScoredSettings settings_for(const ScoredPolicy& base) {
    ScoredSettings settings = base.settings();
    settings.name = "criticalkv";
    settings.capture.projected_value_norms = true;
    return settings;
  }
  std::shared_ptr<const ScoredPolicy> base_;
  double ratio_, epsilon_;
};

nlohmann::json critical_own_defaults() { return {{"first_stage_ratio", 0.5}, {"epsilon", 1e-4}}; }

}  // namespace

PolicyFactory criticalkv_factory() {
  PolicyFactory factory;
  factory.info = {"criticalkv", PolicyKind::kPrefillQueryAware,
                  "base score, then output-aware rescoring (s + eps) * ||v W_o||_1",
                  "kvpress@8bb29b9 criticalkv_press.py (author PR #46)",
                  wrapped_defaults(critical_own_defaults(), "snapkv", snapkv_defaults(),
                                   nlohmann::json::object(), true)};
  factory.make_scorer = [](const nlohmann::json& given) -> std::shared_ptr<const ScoredPolicy> {
    WrappedScorer wrapped = read_wrapped_scorer("criticalkv", given, critical_own_defaults(),
                                                "snapkv", nlohmann::json::object(), true);
    const double ratio = wrapped.own.number("first_stage_ratio");
    if (ratio < 0 || ratio > 1)
      throw InputError("parameter 'first_stage_ratio' of criticalkv must be in [0, 1]");
    return std::make_shared<CriticalKvPolicy>(wrapped.scorer, ratio, wrapped.own.number("epsilon"));
  };
  factory.install = [make = factory.make_scorer](const nlohmann::json& given, CachePlan& plan) {
    plan.prefill = make(given);
  };
  return factory;
}

}  // namespace kvb
