// KNorm (Devoto et al. 2024) — kind B.
//
//   s_j = −‖k_j‖₂   (keep the smallest key norms, per KV head; RoPE preserves the norm)
//
// Source: kvpress @8bb29b9 `knorm_press.py` (docs/methods.md §5). Defaults (kvpress): every layer
// compressed, nothing protected. KVCache-Factory's L2NormCluster instead skips layers 0–1
// (`dense_layers: [0, 1]`). `window` > 0 protects the last tokens — a harness extension, not
// official. Budget: per (layer, KV head), all kept tokens. Ties: lower position first.
#include "kernels/cpu/row_norms.h"
#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

class KnormPolicy : public ScoredPolicy {
 public:
  using ScoredPolicy::ScoredPolicy;
  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    const int length = layer.length;
    std::vector<float> computed;
    const float* norms = layer.key_norms;  // computed by a device backend
    if (!norms) {
      require_keys_values(layer, "knorm", "the key norms");
      computed.resize(static_cast<size_t>(layer.n_kv_heads) * length);
      for (int h = 0; h < layer.n_kv_heads; ++h)
        kernels::row_norms({layer.keys[h], 0, 1, length, layer.head_dim,
                            computed.data() + static_cast<int64_t>(h) * length});
      norms = computed.data();
    }
    std::vector<std::vector<float>> scores(layer.n_kv_heads, std::vector<float>(length));
    for (int h = 0; h < layer.n_kv_heads; ++h)
      for (int j = 0; j < length; ++j) scores[h][j] = -norms[static_cast<int64_t>(h) * length + j];
    return scores;
  }
};

}  // namespace

PolicyFactory knorm_factory() {
  return fixed_capture_factory<KnormPolicy>(
      {"knorm",
       PolicyKind::kPrefillQueryAgnostic,
       "keep the smallest key L2 norms",
       "kvpress@8bb29b9 knorm_press.py; KVCache-Factory L2NormCluster",
       {{"window", 0}, {"dense_layers", nlohmann::json::array()}}},
      capture_only(&CaptureRequest::key_norms));
}

}  // namespace kvb
