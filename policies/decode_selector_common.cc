#include "policies/decode_selector_common.h"

#include <algorithm>

#include "common/errors.h"
#include "policies/selection.h"

namespace kvb {

GqaSelection read_gqa_selection(const PolicyParams& params) {
  return params.choice("gqa", {"per_head", "shared"}) == "per_head" ? GqaSelection::kPerHead
                                                                    : GqaSelection::kShared;
}

const char* gqa_selection_name(GqaSelection mode) {
  return mode == GqaSelection::kPerHead ? "per_head" : "shared";
}

int integer_at_least(const PolicyParams& params, const std::string& name, int minimum) {
  const int value = params.integer(name);
  if (value < minimum)
    throw InputError("parameter '" + name + "' of policy '" + params.policy() + "' is " +
                     std::to_string(value) + "; it must be >= " + std::to_string(minimum));
  return value;
}

double number_at_least(const PolicyParams& params, const std::string& name, double minimum) {
  const double value = params.number(name);
  if (!(value >= minimum))
    throw InputError("parameter '" + name + "' of policy '" + params.policy() + "' is " +
                     params.raw(name).dump() + "; it must be >= " + std::to_string(minimum));
  return value;
}

std::vector<int> read_layers(const PolicyParams& params, const std::string& name) {
  std::vector<int> layers = params.integers(name);
  for (int layer : layers)
    if (layer < 0)
      throw InputError("parameter '" + name + "' of policy '" + params.policy() + "' lists layer " +
                       std::to_string(layer) + "; layer indices are >= 0");
  return layers;
}

int selection_budget(const Budget& budget, int current_length) {
  const int tokens = budget.tokens_for(current_length);
  return std::clamp(tokens, std::min(1, current_length), current_length);
}

int checked_query_heads(const Selection& out, const KvStore& store, const std::string& method) {
  const int n_query_heads = static_cast<int>(out.indices.size());
  if (n_query_heads == 0 || n_query_heads % store.n_kv_heads() != 0)
    throw std::logic_error(method +
                           ": Selection.indices must be sized to the query-head count (a "
                           "multiple of the " +
                           std::to_string(store.n_kv_heads()) + " KV heads) before select()");
  return n_query_heads;
}

ParamDecodeSelector::ParamDecodeSelector(const std::string& method, const nlohmann::json& params,
                                         const nlohmann::json& defaults, const Budget& budget)
    : params_(method, params, defaults),
      budget_(budget),
      dense_layers_(read_layers(params_, "dense_layers")) {}

nlohmann::json ParamDecodeSelector::describe() const {
  nlohmann::json described = params_.resolved();
  described["budget"] = budget_.to_string();
  return described;
}

int ParamDecodeSelector::begin_selection(int layer, const KvStore& store, Selection& out) const {
  const int n_query_heads = checked_query_heads(out, store, name());
  out.logit_bias.clear();
  out.dense = is_dense_layer(dense_layers_, layer);
  return out.dense ? 0 : n_query_heads / store.n_kv_heads();
}

PolicyFactory decode_selector_factory(SelectorInfo info, nlohmann::json defaults,
                                      SelectorBuilder build) {
  PolicyFactory factory;
  factory.info = {std::move(info.name), PolicyKind::kDecodeSelection, std::move(info.summary),
                  std::move(info.source), std::move(defaults)};
  factory.make_selector = [build = std::move(build)](
                              const nlohmann::json& params, const Budget& budget,
                              PlanFiles& files) -> std::shared_ptr<DecodeSelector> {
    return build(params, budget, files);
  };
  return factory;
}

PolicyFactory decode_selector_factory(SelectorInfo info, nlohmann::json defaults,
                                      PlainSelectorMaker make) {
  return decode_selector_factory(std::move(info), std::move(defaults),
                                 [make](const nlohmann::json& params, const Budget& budget,
                                        PlanFiles&) { return make(params, budget); });
}

DeviceSelectionSpec device_selection_of(DeviceSelectionSpec::Scores scores, int budget_tokens,
                                        const std::vector<int>& dense_layers) {
  DeviceSelectionSpec spec;
  spec.scores = scores;
  spec.budget_tokens = budget_tokens;
  spec.dense_layers = dense_layers;
  return spec;
}

}  // namespace kvb
