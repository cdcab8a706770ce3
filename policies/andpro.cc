// AnDPro (Geng et al., NeurIPS 2025, "Anchor Direction Projection") — kind A.
// **APPROXIMATION [UNVERIFIED]**: no public code; the score below is the best-effort reconstruction
// of docs/methods.md §8, not the authors' method. Results must be labelled as such.
//
//   anchor per window query t: o^(t) = Σ_j p_j^(t) v_j,  ô^(t) = o^(t)/‖o^(t)‖
//   c_j = Σ_t p_j^(t) ⟨v_j, ô^(t)⟩   (the token's contribution along the pre-eviction output;
//                                      signed, not clipped — unverified)
//   group mean, pooling as SnapKV, then AdaKV head budgets (DropKV groups AnDPro with the
//   head-adaptive baselines).
// Defaults: w = 32, k = 7, max pooling, α = 0.2, fp32. Budget includes the window.
#include <cmath>

#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

class AnchorProjectionScorer : public ScoredPolicy {
 public:
  AnchorProjectionScorer(ScoredSettings settings, int kernel, Pooling pooling)
      : ScoredPolicy(std::move(settings)), kernel_(kernel), pooling_(pooling) {}

  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    const int length = layer.length, d = layer.head_dim, g = layer.group_size();
    const int w = effective_window(layer, settings().window);
    const int prefix = length - w;
    std::vector<std::vector<float>> scores(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h) {
      const float* values = layer.values[h];
      std::vector<float> sum(prefix, 0.0f);
      for (int a = h * g; a < (h + 1) * g; ++a) {
        const auto probs = window_attention(layer, a, w, Precision::kFp32);
        for (int t = 0; t < w; ++t) {
          const float* p = &probs[static_cast<size_t>(t) * length];
          std::vector<double> anchor(d, 0.0);
          for (int j = 0; j < length; ++j)
            for (int i = 0; i < d; ++i) anchor[i] += p[j] * values[int64_t(j) * d + i];
          double norm = 0;
          for (double x : anchor) norm += x * x;
          norm = std::max(std::sqrt(norm), 1e-12);
          for (int j = 0; j < prefix; ++j) {
            double along = 0;
            for (int i = 0; i < d; ++i) along += values[int64_t(j) * d + i] * anchor[i];
            sum[j] += static_cast<float>(p[j] * along / norm / g);
          }
        }
      }
      scores[h] = pool1d(sum, kernel_, pooling_, Precision::kFp32);
      scores[h].resize(length, 0.0f);
    }
    return scores;
  }

 private:
  int kernel_;
  Pooling pooling_;
};

nlohmann::json andpro_defaults() {
  return {{"window", 32},
          {"kernel", 7},
          {"pooling", "max"},
          {"alpha", 0.2},
          {"normalize", false},
          {"allocation", "official"},
          {"dense_layers", nlohmann::json::array()}};
}

}  // namespace

PolicyFactory andpro_factory() {
  PolicyFactory factory;
  factory.info = {"andpro", PolicyKind::kPrefillQueryAware,
                  "APPROXIMATION: anchor-direction value projection + AdaKV budgets",
                  "none public; reconstruction of docs/methods.md §8 [UNVERIFIED]",
                  andpro_defaults()};
  factory.make_scorer = [](const nlohmann::json& given) -> std::shared_ptr<const ScoredPolicy> {
    const PolicyParams params("andpro", given, andpro_defaults());
    ScoredSettings settings = read_scored_settings(params, PolicyKind::kPrefillQueryAware);
    auto scorer = std::make_shared<AnchorProjectionScorer>(
        settings, params.integer("kernel"),
        parse_pooling(params.choice("pooling", {"avg", "max"})));
    AdaKvOptions options;
    options.alpha = params.number("alpha");
    options.normalize = params.boolean("normalize");
    options.kvpress_allocation = params.choice("allocation", {"official", "kvpress"}) == "kvpress";
    return make_adakv("andpro", scorer, options);
  };
  factory.install = [make = factory.make_scorer](const nlohmann::json& given, CachePlan& plan) {
    plan.prefill = make(given);
  };
  return factory;
}

}  // namespace kvb
