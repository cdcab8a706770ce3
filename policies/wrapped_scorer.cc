#include "policies/wrapped_scorer.h"

#include "policies/registry.h"

namespace kvb {

nlohmann::json wrapped_defaults(const nlohmann::json& own_defaults, const std::string& scorer,
                                const nlohmann::json& scorer_defaults,
                                const nlohmann::json& scorer_overrides, bool scorer_selectable) {
  nlohmann::json combined = scorer_defaults;
  combined.update(scorer_overrides);
  combined.update(own_defaults);
  if (scorer_selectable) combined["scorer"] = scorer;
  return combined;
}

WrappedScorer read_wrapped_scorer(const std::string& wrapper, const nlohmann::json& given,
                                  nlohmann::json own_defaults, const std::string& default_scorer,
                                  const nlohmann::json& scorer_overrides, bool scorer_selectable) {
  std::string scorer = default_scorer;
  if (scorer_selectable && given.is_object() && given.contains("scorer")) {
    if (!given["scorer"].is_string())
      throw InputError("parameter 'scorer' of policy '" + wrapper + "' must be a policy name");
    scorer = given["scorer"].get<std::string>();
  }
  if (scorer_selectable) own_defaults["scorer"] = default_scorer;
  const nlohmann::json overrides =
      scorer == default_scorer ? scorer_overrides : nlohmann::json::object();
  nlohmann::json combined = find_policy(scorer).info.default_params;
  combined.update(overrides);
  combined.update(own_defaults);
  PolicyParams all(wrapper, given, combined);  // checks every key against the union

  nlohmann::json scorer_params = nlohmann::json::object();
  nlohmann::json own_values = nlohmann::json::object();
  const nlohmann::json& scorer_defaults = find_policy(scorer).info.default_params;
  for (const auto& [key, value] : all.resolved().items()) {
    if (own_defaults.contains(key)) own_values[key] = value;
    if (scorer_defaults.contains(key)) scorer_params[key] = value;
  }
  return {PolicyParams(wrapper, own_values, own_defaults), make_scorer(scorer, scorer_params)};
}

}  // namespace kvb
