// Parameters of wrapper methods (AdaKV, CriticalKV, ...): the wrapper's own parameters plus every
// parameter of the scorer it wraps, in one flat JSON object ({"scorer": "dropkv", "alpha": 0.2,
// "window": 8}). Unknown keys are still errors: the known set is the union.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "policies/params.h"
#include "policies/scored_policy.h"

namespace kvb {

struct WrappedScorer {
  PolicyParams own;                            // the wrapper's parameters (checked)
  std::shared_ptr<const ScoredPolicy> scorer;  // built from the remaining keys
};

// `own_defaults` are the wrapper's parameters; `scorer_overrides` replace scorer defaults when the
// scorer is `default_scorer` (e.g. AdaKV runs SnapKV with mean rows and max pooling). When
// `scorer_selectable`, the key "scorer" chooses the wrapped method.
WrappedScorer read_wrapped_scorer(const std::string& wrapper, const nlohmann::json& given,
                                  nlohmann::json own_defaults, const std::string& default_scorer,
                                  const nlohmann::json& scorer_overrides, bool scorer_selectable);

// The documented default parameter object of such a wrapper (for list_policies).
// (Takes the scorer's defaults directly: it runs while the registry table is being built.)
nlohmann::json wrapped_defaults(const nlohmann::json& own_defaults, const std::string& scorer,
                                const nlohmann::json& scorer_defaults,
                                const nlohmann::json& scorer_overrides, bool scorer_selectable);

}  // namespace kvb
