// Full KV: no compression. An empty plan; the baseline every method is compared with, and the base
// that kernel-walk modifiers stack on ("full+art").
#include "policies/methods.h"
#include "policies/params.h"

namespace kvb {

PolicyFactory full_factory() {
  PolicyFactory factory;
  factory.info = {"full", PolicyKind::kPrefillQueryAgnostic, "Full KV cache (no compression)", "-",
                  nlohmann::json::object()};
  factory.install = [](const nlohmann::json& params, CachePlan&) {
    PolicyParams("full", params, nlohmann::json::object());  // rejects any parameter
  };
  factory.keeps_whole_cache = true;
  return factory;
}

}  // namespace kvb
