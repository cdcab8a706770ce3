#include "harness/sweep/select_decode.h"

#include <algorithm>
#include <set>

#include "common/errors.h"
#include "policies/decode_selectors.h"

namespace kvb {
namespace {

KvStore store_from_inputs(const DecodeSelectInputs& in) {
  KvStore store(in.n_layers, in.n_kv_heads, in.head_dim);
  store.reserve(in.length);
  const int64_t d = in.head_dim;
  std::vector<float> k(static_cast<size_t>(in.n_kv_heads) * d), v(k.size());
  for (int l = 0; l < in.n_layers; ++l)
    for (int t = 0; t < in.length; ++t) {
      for (int h = 0; h < in.n_kv_heads; ++h) {
        const int64_t at = ((static_cast<int64_t>(l) * in.n_kv_heads + h) * in.length + t) * d;
        std::copy_n(in.keys + at, d, &k[h * d]);
        std::copy_n(in.values + at, d, &v[h * d]);
      }
      store.append(l, t, k.data(), v.data());
    }
  return store;
}

}  // namespace

nlohmann::json select_decode_positions(const std::string& policy, const nlohmann::json& params,
                                       const Budget& budget, const DecodeSelectInputs& in) {
  if (in.n_layers <= 0 || in.n_kv_heads <= 0 || in.length <= 0 || in.head_dim <= 0 ||
      in.n_query_heads % in.n_kv_heads != 0)
    throw InputError(
        "select: q_decode [layers, Hq, d] and k/v [layers, Hkv, L, d] must be "
        "non-empty with Hq a multiple of Hkv");
  PlanFiles files;
  for (const auto& [name, tensor] : in.tensors) files.give_tensor(name, tensor);
  const CachePlan plan = make_cache_plan(policy, params, budget, &files);
  if (!plan.selector)
    throw InputError("select: policy '" + policy + "' is not a decode-time selector (kind D); " +
                     "q_decode applies to " + decode_selector_names());
  const std::shared_ptr<DecodeSelector> selector = plan.selector;
  const KvStore store = store_from_inputs(in);
  selector->start(store, in.length, budget.tokens_for(in.length));
  const int group = in.n_query_heads / in.n_kv_heads;
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < in.n_layers; ++l) {
    Selection selection;
    selection.indices.resize(in.n_query_heads);
    selector->select(l, in.query + static_cast<int64_t>(l) * in.n_query_heads * in.head_dim, store,
                     selection);
    nlohmann::json heads = nlohmann::json::array();
    for (int h = 0; h < in.n_kv_heads; ++h) {
      std::set<int32_t> positions;
      for (int g = 0; g < group; ++g) {
        if (selection.dense) {
          for (int t = 0; t < in.length; ++t) positions.insert(t);
        } else {
          for (int32_t j : selection.indices[h * group + g])
            positions.insert(store.positions(l, h)[j]);
        }
      }
      heads.push_back(std::vector<int32_t>(positions.begin(), positions.end()));
    }
    layers.push_back(std::move(heads));
  }
  nlohmann::json out = {{"selected", std::move(layers)}, {"policy", policy}};
  if (auto described = std::dynamic_pointer_cast<DescribedDecodeSelector>(selector))
    out["params"] = described->describe();
  return out;
}

}  // namespace kvb
