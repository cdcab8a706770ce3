#include "policies/scored_policy.h"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "common/errors.h"
#include "policies/selection.h"

namespace kvb {

ScoredSettings read_scored_settings(const PolicyParams& params, PolicyKind kind) {
  ScoredSettings settings;
  settings.name = params.policy();
  settings.kind = kind;
  const auto& values = params.resolved();
  if (values.contains("window")) settings.window = params.integer("window");
  if (values.contains("sinks")) settings.sinks = params.integer("sinks");
  if (values.contains("dense_layers")) settings.dense_layers = params.integers("dense_layers");
  if (values.contains("budget_includes_window"))
    settings.budget_includes_window = params.boolean("budget_includes_window");
  if (settings.window < 0 || settings.sinks < 0)
    throw InputError("policy '" + settings.name + "': window and sinks must be >= 0");
  if (kind == PolicyKind::kPrefillQueryAware) settings.capture.window_queries = settings.window;
  // A method reads the prompt's keys and values unless it says its statistics suffice.
  settings.capture.host_keys_values = true;
  return settings;
}

std::vector<int> ScoredPolicy::layer_budgets(const PrefillView& view, int budget_tokens) const {
  return std::vector<int>(view.layers.size(), budget_tokens);
}

std::vector<std::vector<int32_t>> ScoredPolicy::select_layer(const LayerPrefillView& layer,
                                                             int layer_budget) const {
  const auto scores = score(layer);
  std::vector<std::vector<int32_t>> kept(layer.n_kv_heads);
  for (int h = 0; h < layer.n_kv_heads; ++h)
    kept[h] = keep_top(scores[h], layer_budget, settings_.sinks, settings_.window);
  return kept;
}

KeptIndices ScoredPolicy::select(const PrefillView& view, int budget_tokens) const {
  const int length = view.prompt_length();
  check_budget(name(), budget_tokens,
               settings_.budget_may_exceed_prompt ? std::max(length, budget_tokens) : length);
  std::vector<int> budgets = layer_budgets(view, budget_tokens);
  if (!settings_.budget_includes_window)
    for (auto& b : budgets) b += settings_.window + settings_.sinks;
  KeptIndices kept(view.layers.size());
  auto select_one = [&](size_t l) {
    const LayerPrefillView& layer = view.layers[l];
    if (is_dense_layer(settings_.dense_layers, layer.layer) || budgets[l] >= layer.length) {
      kept[l].assign(layer.n_kv_heads, keep_all(layer.length));
    } else {
      kept[l] = select_layer(layer, budgets[l]);
    }
  };
  // Layers are independent. From a device's statistics a layer's selection is plain host
  // arithmetic (pooling, reductions, top-k over L per head): run them in parallel. Scoring from
  // the keys calls BLAS, which threads each call itself: keep those layers in order.
  const bool statistics_only = !view.layers.empty() && !view.layers[0].has_keys_values();
  if (statistics_only) {
    tbb::parallel_for(size_t{0}, view.layers.size(), select_one);
  } else {
    for (size_t l = 0; l < view.layers.size(); ++l) select_one(l);
  }
  return kept;
}

PolicyFactory scored_factory(PolicyInfo info, ScoredBuilder build) {
  PolicyFactory factory;
  factory.info = info;
  factory.make_scorer = [info, build](const nlohmann::json& params) {
    return build(PolicyParams(info.name, params, info.default_params));
  };
  factory.install = [make = factory.make_scorer](const nlohmann::json& params, CachePlan& plan) {
    plan.prefill = make(params);
  };
  return factory;
}

}  // namespace kvb
