#include "policies/decode_selector_common.h"

#include <algorithm>
#include <numeric>

#include "engine/errors.h"

namespace kvb {

SelectorParams::SelectorParams(std::string method, const nlohmann::json& params,
                               std::set<std::string> known)
    : method_(std::move(method)), params_(params.is_null() ? nlohmann::json::object() : params) {
  if (!params_.is_object())
    throw InputError(method_ + ": parameters must be a JSON object, got " + params_.dump());
  for (const auto& [key, value] : params_.items()) {
    if (known.count(key)) continue;
    std::string names;
    for (const std::string& name : known) names += (names.empty() ? "" : ", ") + name;
    throw InputError(method_ + ": unknown parameter '" + key + "' (known: " + names + ")");
  }
}

int SelectorParams::get_int(const std::string& key, int fallback, int minimum) const {
  if (!params_.contains(key)) return fallback;
  const nlohmann::json& value = params_.at(key);
  if (!value.is_number_integer())
    throw InputError(method_ + ": parameter '" + key + "' must be an integer, got " + value.dump());
  const int result = value.get<int>();
  if (result < minimum)
    throw InputError(method_ + ": parameter '" + key + "' = " + std::to_string(result) +
                     " must be >= " + std::to_string(minimum));
  return result;
}

double SelectorParams::get_double(const std::string& key, double fallback, double minimum) const {
  if (!params_.contains(key)) return fallback;
  const nlohmann::json& value = params_.at(key);
  if (!value.is_number())
    throw InputError(method_ + ": parameter '" + key + "' must be a number, got " + value.dump());
  const double result = value.get<double>();
  if (result < minimum)
    throw InputError(method_ + ": parameter '" + key + "' = " + value.dump() + " must be >= " +
                     std::to_string(minimum));
  return result;
}

bool SelectorParams::get_bool(const std::string& key, bool fallback) const {
  if (!params_.contains(key)) return fallback;
  const nlohmann::json& value = params_.at(key);
  if (!value.is_boolean())
    throw InputError(method_ + ": parameter '" + key + "' must be true or false, got " + value.dump());
  return value.get<bool>();
}

std::string SelectorParams::get_string(const std::string& key, const std::string& fallback) const {
  if (!params_.contains(key)) return fallback;
  const nlohmann::json& value = params_.at(key);
  if (!value.is_string())
    throw InputError(method_ + ": parameter '" + key + "' must be a string, got " + value.dump());
  return value.get<std::string>();
}

std::vector<int> SelectorParams::get_layers(const std::string& key,
                                            const std::vector<int>& fallback) const {
  if (!params_.contains(key)) return fallback;
  const nlohmann::json& value = params_.at(key);
  std::vector<int> layers;
  if (value.is_array()) {
    for (const nlohmann::json& layer : value) {
      if (!layer.is_number_integer() || layer.get<int>() < 0)
        throw InputError(method_ + ": '" + key + "' must list layer indices >= 0, got " + value.dump());
      layers.push_back(layer.get<int>());
    }
    return layers;
  }
  throw InputError(method_ + ": '" + key + "' must be an array of layer indices such as [0, 1], got " +
                   value.dump());
}

GqaSelection SelectorParams::get_gqa(GqaSelection fallback) const {
  const std::string mode = get_string("gqa", gqa_selection_name(fallback));
  if (mode == "per_head") return GqaSelection::kPerHead;
  if (mode == "shared") return GqaSelection::kShared;
  throw InputError(method_ + ": parameter 'gqa' must be \"per_head\" or \"shared\", got \"" + mode +
                   "\"");
}

const char* gqa_selection_name(GqaSelection mode) {
  return mode == GqaSelection::kPerHead ? "per_head" : "shared";
}

int selection_budget(const Budget& budget, int current_length) {
  const int tokens = budget.tokens_for(current_length);
  return std::clamp(tokens, std::min(1, current_length), current_length);
}

std::vector<int32_t> top_k_indices(const float* scores, int n, int k) {
  k = std::clamp(k, 0, n);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto better = [scores](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), better);
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

bool is_dense_layer(const std::vector<int>& dense_layers, int layer) {
  return std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end();
}

int checked_query_heads(const Selection& out, const KvStore& store, const std::string& method) {
  const int n_query_heads = static_cast<int>(out.indices.size());
  if (n_query_heads == 0 || n_query_heads % store.n_kv_heads() != 0)
    throw InputError(method + ": Selection.indices must be sized to the query-head count (a multiple "
                     "of the " + std::to_string(store.n_kv_heads()) + " KV heads) before select()");
  return n_query_heads;
}

}  // namespace kvb
