// TOPK oracle (docs/methods.md §14) — kind D, an upper bound, not a deployable method.
//
// At every decode step, per layer and per query head: compute the exact logits q.k_j against the
// whole cache, keep the k = int(r * T) largest (T = current length, r the budget ratio; a token
// budget is used as is), renormalise the softmax over them and attend. No sinks or window forced.
// Dense layers {0, 1} (MagicPIG's topk_cache.py).
// GQA: "per_head" (default; each query head its own set, the union is what is loaded) or "shared"
// (one set per KV head ranked by the sum of the group's softmax weights).
// Device form (per_head): exact scores (kernels/cuda/query_key_scores.h, the CPU twin computes the
// logits here), the same top-k per query head, the budget applied to the current length.
// Source: Infini-AI-Lab/MagicPIG evaluations/RULER/pred/topk_cache.py; BinaryPC Appendix A.1.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/query_key_scores.h"
#include "kernels/cpu/topk_select.h"
#include "policies/decode_selector_common.h"
#include "policies/decode_selectors.h"
#include "policies/methods.h"
#include "policies/selection.h"

namespace kvb {
namespace {

nlohmann::json topk_defaults() { return {{"dense_layers", {0, 1}}, {"gqa", "per_head"}}; }

class TopkOracleSelector : public ParamDecodeSelector {
 public:
  TopkOracleSelector(const nlohmann::json& params, const Budget& budget)
      : ParamDecodeSelector("topk", params, topk_defaults(), budget) {
    gqa_ = read_gqa_selection(params_);
  }

  void start(const KvStore&, int, int) override {}
  void on_append(const KvStore&, int) override {}

  // Per head, the device ranks the same exact logits; the group-shared form (a sum of softmax
  // weights over the group) has no device building block and stays on the CPU.
  bool runs_on_device() const override { return gqa_ == GqaSelection::kPerHead; }
  std::optional<DeviceSelectionSpec> device_selection(const ModelConfig&, int) const override {
    if (!runs_on_device()) return std::nullopt;
    // The budget applies to the current length at every step, as select() does.
    DeviceSelectionSpec spec = device_selection_of(
        DeviceSelectionSpec::Scores::kExactDot,
        budget_.unit == Budget::Unit::kTokens ? static_cast<int>(budget_.value) : 0, dense_layers_);
    if (budget_.unit == Budget::Unit::kFraction) spec.budget_fraction = budget_.value;
    return spec;
  }

  void select(int layer, const float* query, const KvStore& store, Selection& out) override {
    const int group = begin_selection(layer, store, out);
    if (group == 0) return;  // a dense layer
    const int d = store.head_dim();
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const int length = store.length(layer, h);
      const int k = selection_budget(budget_, length);
      const float* keys = store.keys(layer, h);
      std::vector<std::vector<float>> logits(group, std::vector<float>(length));
      for (int g = 0; g < group; ++g) {
        kernels::query_key_scores(query + static_cast<int64_t>(h * group + g) * d, keys, length, d,
                                  logits[g].data());
      }
      if (gqa_ == GqaSelection::kPerHead) {
        for (int g = 0; g < group; ++g)
          out.indices[h * group + g] = kernels::topk_select(logits[g].data(), length, k);
      } else {
        const std::vector<int32_t> shared =
            kernels::topk_select(group_weight_sum(logits, d).data(), length, k);
        for (int g = 0; g < group; ++g) out.indices[h * group + g] = shared;
      }
    }
  }

 private:
  // Sum over the group of each head's softmax weights (scale 1/sqrt(d)).
  static std::vector<float> group_weight_sum(const std::vector<std::vector<float>>& logits, int d) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<float> sum(logits[0].size(), 0.0f);
    for (const std::vector<float>& head : logits) {
      const float top = *std::max_element(head.begin(), head.end());
      double mass = 0;
      for (float logit : head) mass += std::exp((logit - top) * scale);
      for (size_t j = 0; j < head.size(); ++j)
        sum[j] += static_cast<float>(std::exp((head[j] - top) * scale) / mass);
    }
    return sum;
  }

  GqaSelection gqa_ = GqaSelection::kPerHead;
};

}  // namespace

std::shared_ptr<DescribedDecodeSelector> make_topk_selector(const nlohmann::json& params,
                                                            const Budget& budget) {
  return std::make_shared<TopkOracleSelector>(params, budget);
}

PolicyFactory topk_factory() {
  return decode_selector_factory(
      {"topk", "oracle: exact top-k logits per decode step (upper bound, not deployable)",
       "Infini-AI-Lab/MagicPIG @ac9aa36 evaluations/RULER/pred/topk_cache.py"},
      topk_defaults(), make_topk_selector);
}

}  // namespace kvb
