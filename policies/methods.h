// One factory per method, each defined in the method's own file (policies/<name>.cc).
#pragma once

#include "policies/registry.h"

namespace kvb {

PolicyFactory full_factory();
PolicyFactory streamingllm_factory();
PolicyFactory snapkv_factory();

}  // namespace kvb

namespace kvb {

class PolicyParams;
struct WindowScoreOptions;
// SnapKV's parameters with their defaults, shared by the SnapKV-family methods (PyramidKV, AdaKV).
nlohmann::json snapkv_defaults();
WindowScoreOptions read_window_score_options(const PolicyParams& params);

}  // namespace kvb
