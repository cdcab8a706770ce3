#include "harness/gpu_selection.h"

#include "engine/errors.h"
#include "policies/decode_selectors.h"

namespace kvb {

bool gpu_selects_for(const std::string& policy_name) {
  return policy_name == "binarypc" || policy_name == "quest";
}

SparseDecodeConfig gpu_selection_config(const DecodeSelector& selector, int budget_tokens,
                                        const BinaryProjectionSet* projection) {
  const auto* described = dynamic_cast<const DescribedDecodeSelector*>(&selector);
  if (!described || !gpu_selects_for(selector.name()))
    throw InputError("decode selection on the GPU runs binarypc and quest; '" + selector.name() +
                     "' runs on the CPU engine only");
  const nlohmann::json params = described->describe();
  SparseDecodeConfig config;
  config.token_budget = budget_tokens;
  config.dense_layers = params.at("dense_layers").get<std::vector<int>>();
  if (selector.name() == "quest") {
    config.method = SparseDecodeConfig::Method::kQuest;
    config.page_size = params.at("page_size").get<int>();
    config.min_pages = params.at("min_pages").get<int>();
    config.shared_pages = params.at("gqa").get<std::string>() == "shared";
    config.keep_last_page = params.at("keep_last_page").get<bool>();
    return config;
  }
  config.method = SparseDecodeConfig::Method::kBinaryPc;
  config.eas = params.at("eas").get<bool>();
  config.err_ratio = params.at("err_ratio").get<double>();
  const std::string path = params.at("projection").get<std::string>();
  if (projection) {
    config.projection = projection->rows;
  } else if (!path.empty() && path != "(given tensor)") {
    config.projection = BinaryProjectionSet::load(path).rows;
  }
  return config;
}

}  // namespace kvb
