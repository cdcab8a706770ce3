// KNorm (Devoto et al. 2024) — kind B.
//
//   s_j = −‖k_j‖₂   (keep the smallest key norms, per KV head; RoPE preserves the norm)
//
// Source: kvpress @8bb29b9 `knorm_press.py` (docs/methods.md §5). Defaults (kvpress): every layer
// compressed, nothing protected. KVCache-Factory's L2NormCluster instead skips layers 0–1
// (`dense_layers: [0, 1]`). `window` > 0 protects the last tokens — a harness extension, not
// official. Budget: per (layer, KV head), all kept tokens. Ties: lower position first.
#include <cmath>

#include "policies/methods.h"
#include "policies/scored_policy.h"

namespace kvb {
namespace {

class KnormPolicy : public ScoredPolicy {
 public:
  using ScoredPolicy::ScoredPolicy;
  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    std::vector<std::vector<float>> scores(layer.n_kv_heads, std::vector<float>(layer.length));
    for (int h = 0; h < layer.n_kv_heads; ++h) {
      for (int j = 0; j < layer.length; ++j) {
        const float* k = layer.keys[h] + static_cast<int64_t>(j) * layer.head_dim;
        float squared = 0.0f;
        for (int i = 0; i < layer.head_dim; ++i) squared += k[i] * k[i];
        scores[h][j] = -std::sqrt(squared);
      }
    }
    return scores;
  }
};

}  // namespace

PolicyFactory knorm_factory() {
  return scored_factory(
      {"knorm", PolicyKind::kPrefillQueryAgnostic, "keep the smallest key L2 norms",
       "kvpress@8bb29b9 knorm_press.py; KVCache-Factory L2NormCluster",
       {{"window", 0}, {"dense_layers", nlohmann::json::array()}}},
      [](const PolicyParams& params) {
        return std::make_shared<KnormPolicy>(
            read_scored_settings(params, PolicyKind::kPrefillQueryAgnostic));
      });
}

}  // namespace kvb
