// TOVA (Oren et al. 2024) — kind C, token omission via attention.
//
//   score[j] = mean over ALL query heads of the layer of the last query's attention on j
//   whenever the cache exceeds C: keep the top-C (same indices for every KV head of the layer)
//
// Applied after the prefill (the last prompt query's attention) and, with decode_eviction (the
// official behaviour, default on), after every decode step. Nothing is forced (kvpress's prefill
// port additionally forces the last token; not done here).
// Source: schwartz-lab-NLP/TOVA `src/tova_cache.py` (`reduce`); kvpress `tova_press.py`
// (docs/methods.md §4). Budget C per layer (every KV head), covering all tokens. Ties: lower
// position kept. On a device engine the decode step evicts the same way (engine/device_eviction.h,
// kLayerMean, keep = C): every KV head of a layer holds the same entries, so each head's own top-C
// of the shared score is the layer's.
#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

class TovaPolicy : public ScoredPolicy {
 public:
  TovaPolicy(ScoredSettings settings, Precision precision)
      : ScoredPolicy(std::move(settings)), precision_(precision) {}
  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    std::vector<float> mean(layer.length, 0.0f);
    for (int a = 0; a < layer.n_query_heads; ++a) {
      const auto probs = window_attention(layer, a, 1, precision_);
      for (int j = 0; j < layer.length; ++j) mean[j] += probs[j] / layer.n_query_heads;
    }
    return std::vector<std::vector<float>>(layer.n_kv_heads, mean);
  }

 private:
  Precision precision_;
};

class TovaDecodeEviction : public DecodeEvictionPolicy {
 public:
  explicit TovaDecodeEviction(std::vector<int> dense_layers)
      : dense_layers_(std::move(dense_layers)) {}
  std::string name() const override { return "tova"; }
  void start(const KvStore&, int, int budget_tokens) override { budget_ = budget_tokens; }
  void after_step(const DecodeStepView& step, KvStore& store) override {
    if (store.length(step.layer, 0) <= budget_ || is_dense_layer(dense_layers_, step.layer)) return;
    const int length = store.length(step.layer, 0);
    std::vector<float> mean(length, 0.0f);
    const int n_query_heads = static_cast<int>(step.probabilities.size());
    for (int a = 0; a < n_query_heads; ++a)
      for (int j = 0; j < length; ++j) mean[j] += step.probabilities[a][j] / n_query_heads;
    const auto kept = keep_top(mean, budget_, 0, 0);
    for (int h = 0; h < store.n_kv_heads(); ++h) evict_except(store, step.layer, h, kept);
  }
  // The device form: the layer mean of this step's attention, keep = budget outside dense layers.
  bool runs_on_device() const override { return true; }
  std::optional<DeviceEvictionSpec> device_eviction(int n_layers,
                                                    int budget_tokens) const override {
    DeviceEvictionSpec spec;
    spec.statistic = DeviceEvictionSpec::Statistic::kLayerMean;
    for (int l = 0; l < n_layers; ++l)
      spec.keep.push_back(is_dense_layer(dense_layers_, l) ? -1 : budget_tokens);
    return spec;
  }

 private:
  std::vector<int> dense_layers_;
  int budget_ = 0;
};

}  // namespace

PolicyFactory tova_factory() {
  PolicyFactory factory;
  factory.info = {"tova",
                  PolicyKind::kDecodeEviction,
                  "last query's head-averaged attention, top-C per layer, every step",
                  "schwartz-lab-NLP/TOVA src/tova_cache.py; kvpress tova_press.py",
                  {{"decode_eviction", true},
                   {"precision", "fp32"},
                   {"dense_layers", nlohmann::json::array()}}};
  factory.make_scorer = [info = factory.info](const nlohmann::json& given) {
    const PolicyParams params(info.name, given, info.default_params);
    ScoredSettings settings = read_scored_settings(params, PolicyKind::kPrefillQueryAware);
    settings.capture.window_queries = 1;
    settings.budget_may_exceed_prompt = params.boolean("decode_eviction");
    return std::make_shared<TovaPolicy>(
        settings, parse_precision(params.choice("precision", {"bf16", "fp32"})));
  };
  factory.install = [info = factory.info, make = factory.make_scorer](const nlohmann::json& given,
                                                                      CachePlan& plan) {
    plan.prefill = make(given);
    const PolicyParams params(info.name, given, info.default_params);
    if (params.boolean("decode_eviction"))
      plan.decode_eviction = std::make_shared<TovaDecodeEviction>(params.integers("dense_layers"));
  };
  return factory;
}

}  // namespace kvb
