// AdaKV (Feng et al. 2024) — kind A, head-adaptive budgets inside a layer, wrapping any scorer.
//
// Per layer, B = C − protected (window, sinks) per head, H = H_kv heads (the official
// `gqa_support` mode: scores reduced over the group before pooling):
//   1. optional normalize: head h's scores × (sum of its top-B)/(sum of all its scores)
//   2. global top H·B over every head's candidate scores → c_h winners from head h
//   3. B_h = round(c_h·(1 − α) + ⌊α·B⌋)   (round half to even, as torch.round)
//   4. head h keeps its own top B_h by its un-normalised scores, plus the protected tokens
// Σ_h B_h may differ from H·B by the rounding (official). allocation "kvpress" (AdaKVPress) instead
// forces each head's top ⌊α·B⌋ and keeps the global top H·B, so the total is exactly H·B.
// Heads hold genuinely different lengths; the KvStore compaction frees the difference.
//
// Source: FFY0/AdaKV @efe4e2e `adaptive_snapkv/monkeypatch/snapkv_utils.py`
// (AdaptiveSnapKVCluster.update_kv_gqa), `experiments/LongBench/pred.py`; kvpress `adakv_press.py`
// (docs/methods.md §7). Defaults: α = 0.2 (pred.py --floor_alpha), normalize off, scorer SnapKV
// with w = 32, k = 7, max pooling, mean over window rows, group mean before pooling.
// Registered compositions: adadropkv (DropKV scores, its own defaults), criticaladakv (CriticalKV's
// two-stage selection inside the AdaKV budgets, §7), andpro (see andpro.cc).
#include <algorithm>
#include <cmath>

#include "policies/methods.h"
#include "policies/selection.h"
#include "policies/wrapped_scorer.h"

namespace kvb {

std::vector<int> adakv_head_budgets(const std::vector<std::vector<float>>& candidate_scores,
                                    int per_head_budget, const AdaKvOptions& options) {
  const int heads = static_cast<int>(candidate_scores.size());
  const int b = per_head_budget;
  const int floor_share = static_cast<int>(std::floor(options.alpha * b));
  std::vector<float> flat;
  std::vector<int> head_of;
  for (int h = 0; h < heads; ++h) {
    std::vector<float> scores = candidate_scores[h];
    if (options.kvpress_allocation) {
      for (int32_t j : top_k(scores, floor_share)) scores[j] = std::numeric_limits<float>::max();
    } else if (options.normalize) {
      double top = 0, all = 0;
      for (int32_t j : top_k(scores, b)) top += scores[j];
      for (float s : scores) all += s;
      if (all != 0)
        for (auto& s : scores) s = static_cast<float>(s * (top / all));
    }
    flat.insert(flat.end(), scores.begin(), scores.end());
    head_of.insert(head_of.end(), scores.size(), h);
  }
  std::vector<int> counts(heads, 0);
  for (int32_t i : top_k_set(flat, heads * b)) ++counts[head_of[i]];
  if (options.kvpress_allocation) return counts;
  std::vector<int> budgets(heads);
  for (int h = 0; h < heads; ++h) {
    const double share = counts[h] * (1.0 - options.alpha) + floor_share;
    budgets[h] = std::clamp(static_cast<int>(std::nearbyint(share)), 0,
                            static_cast<int>(candidate_scores[h].size()));
  }
  return budgets;
}

namespace {

class AdaKvPolicy : public ScoredPolicy {
 public:
  AdaKvPolicy(std::string name, std::shared_ptr<const ScoredPolicy> scorer, AdaKvOptions options)
      : ScoredPolicy(settings_for(std::move(name), *scorer, options)),
        scorer_(std::move(scorer)),
        options_(options) {}

  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    return scorer_->score(layer);
  }
  std::vector<int> layer_budgets(const PrefillView& view, int budget_tokens) const override {
    return scorer_->layer_budgets(view, budget_tokens);  // pyram_mode when wrapping PyramidKV
  }

 protected:
  std::vector<std::vector<int32_t>> select_layer(const LayerPrefillView& layer,
                                                 int layer_budget) const override {
    const ProtectedSpan span = protected_span(layer.length, settings().sinks, settings().window);
    const int begin = span.begin(), end = span.end();
    const int per_head = std::max(0, layer_budget - span.sinks - span.window);
    const auto scores = score(layer);
    std::vector<std::vector<float>> candidates(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h)
      candidates[h].assign(scores[h].begin() + begin, scores[h].begin() + end);
    const std::vector<int> budgets = adakv_head_budgets(candidates, per_head, options_);
    std::vector<float> value_norms;
    std::vector<std::vector<int32_t>> kept(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h) {
      std::vector<int32_t> chosen;
      if (options_.critical) {
        const auto nu = projected_value_norms(layer, h);
        const std::vector<float> nu_candidates(nu.begin() + begin, nu.begin() + end);
        const int forced = static_cast<int>(std::floor(options_.first_stage_ratio * budgets[h]));
        chosen = critical_top(candidates[h], nu_candidates, budgets[h], forced, options_.epsilon);
      } else {
        chosen = top_k_set(candidates[h], budgets[h]);
      }
      kept[h] = span.kept(chosen);
    }
    return kept;
  }

 private:
  static ScoredSettings settings_for(std::string name, const ScoredPolicy& scorer,
                                     const AdaKvOptions& options) {
    ScoredSettings settings = scorer.settings();
    settings.name = std::move(name);
    settings.capture.projected_value_norms |= options.critical;  // ‖v W_o‖ (criticalkv.cc)
    return settings;
  }

  std::shared_ptr<const ScoredPolicy> scorer_;
  AdaKvOptions options_;
};

nlohmann::json snapkv_under_adakv() {
  return {{"window", 32},
          {"kernel", 7},
          {"pooling", "max"},
          {"aggregate", "mean"},
          {"gqa_before_pooling", true}};
}

nlohmann::json adakv_own_defaults(bool critical) {
  nlohmann::json own = {{"alpha", 0.2}, {"normalize", false}, {"allocation", "official"}};
  if (critical) own.update({{"first_stage_ratio", 0.5}, {"epsilon", 1e-4}});
  return own;
}

AdaKvOptions read_adakv_options(const PolicyParams& params, bool critical) {
  AdaKvOptions options;
  options.alpha = params.number("alpha");
  if (options.alpha < 0 || options.alpha > 1)
    throw InputError("parameter 'alpha' of policy '" + params.policy() + "' must be in [0, 1]");
  options.normalize = params.boolean("normalize");
  options.kvpress_allocation = params.choice("allocation", {"official", "kvpress"}) == "kvpress";
  options.critical = critical;
  if (critical) {
    options.first_stage_ratio = params.number("first_stage_ratio");
    options.epsilon = params.number("epsilon");
  }
  return options;
}

}  // namespace

std::shared_ptr<const ScoredPolicy> make_adakv(std::string name,
                                               std::shared_ptr<const ScoredPolicy> scorer,
                                               AdaKvOptions options) {
  return std::make_shared<AdaKvPolicy>(std::move(name), std::move(scorer), options);
}

// A registry entry for AdaKV around `scorer` (selectable by the "scorer" key when `selectable`).
PolicyFactory adakv_family_factory(const std::string& name, const std::string& summary,
                                   const std::string& scorer, const nlohmann::json& scorer_defaults,
                                   const nlohmann::json& overrides, bool selectable,
                                   bool critical) {
  PolicyFactory factory;
  factory.info = {name, PolicyKind::kPrefillQueryAware, summary,
                  "FFY0/AdaKV@efe4e2e snapkv_utils.py; kvpress@8bb29b9 adakv_press.py" +
                      std::string(critical ? ", criticalkv_press.py" : ""),
                  wrapped_defaults(adakv_own_defaults(critical), scorer, scorer_defaults, overrides,
                                   selectable)};
  factory.make_scorer = [=](const nlohmann::json& given) {
    WrappedScorer wrapped = read_wrapped_scorer(name, given, adakv_own_defaults(critical), scorer,
                                                overrides, selectable);
    return make_adakv(name, wrapped.scorer, read_adakv_options(wrapped.own, critical));
  };
  factory.install = [make = factory.make_scorer](const nlohmann::json& given, CachePlan& plan) {
    plan.prefill = make(given);
  };
  return factory;
}

PolicyFactory adakv_factory() {
  return adakv_family_factory("adakv", "head-adaptive budgets around any scorer (default SnapKV)",
                              "snapkv", snapkv_defaults(), snapkv_under_adakv(), true, false);
}

PolicyFactory adadropkv_factory() {
  return adakv_family_factory("adadropkv", "AdaKV head budgets with DropKV scores", "dropkv",
                              dropkv_defaults(), nlohmann::json::object(), false, false);
}

PolicyFactory criticaladakv_factory() {
  return adakv_family_factory("criticaladakv",
                              "CriticalKV two-stage selection inside AdaKV head budgets", "snapkv",
                              snapkv_defaults(), snapkv_under_adakv(), true, true);
}

}  // namespace kvb
