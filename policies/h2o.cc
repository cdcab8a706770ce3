// H2O (Zhang et al. 2023), heavy hitters + recent tokens. Two registered variants:
//
// "h2o" — kind A, the prefill-only port most eviction benchmarks mean (KVCache-Factory
//   H2OKVCluster): s_h[j] = mean over the GQA group of Σ_{all L prompt queries} A_a[i, j] for
//   j < L − w (the captured attention column sums), no pooling; keep the top C − w plus the window.
//   Defaults: w = 8 (KVCache-Factory scripts). Budget C per (layer, KV head), includes w.
//
// "h2o_decode" — kind C, the official real-drop algorithm (FMInference/H2O
//   `h2o_hf/utils_real_drop/modify_llama.py`): every token accumulates S[j] = Σ of the attention it
//   received from every query so far (prefill rows, then each decode query; summed over the GQA
//   group). Whenever the cache holds more than hh + recent tokens, keep the top-hh by S among
//   [0, T − recent) plus the last `recent`. Budget = hh + recent; recent = recent_ratio · budget
//   (the scripts' heavy_ratio = recent_ratio gives 0.5). The prefill applies the same rule once.
//   On a device engine the decode step runs the same rule (engine/device_eviction.h,
//   kAccumulatedGroupSum from the prefill's column sums, keep = budget, recent protected): the
//   accumulated scores then live on the device.
//
// Source: FMInference/H2O; KVCache-Factory @5fb995d `pyramidkv/pyramidkv_utils.py` (docs/methods.md
// §4). Ties: lower position first (kept), i.e. the later of equal scores is evicted.
#include <algorithm>

#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

// Σ over the group's query heads of the column sums: [Hkv][L].
std::vector<std::vector<float>> group_column_sums(const LayerPrefillView& layer, bool mean) {
  if (!layer.column_sums)
    throw InputError("h2o needs the attention column sums of the prefill (capture not provided)");
  std::vector<std::vector<float>> per_query_head(layer.n_query_heads);
  for (int a = 0; a < layer.n_query_heads; ++a)
    per_query_head[a].assign(layer.column_sums + static_cast<int64_t>(a) * layer.length,
                             layer.column_sums + static_cast<int64_t>(a + 1) * layer.length);
  auto grouped = reduce_groups(per_query_head, layer.n_kv_heads, GroupReduce::kMean);
  if (!mean)
    for (auto& scores : grouped)
      for (auto& s : scores) s *= static_cast<float>(layer.group_size());
  return grouped;
}

class H2oPrefillPolicy : public ScoredPolicy {
 public:
  using ScoredPolicy::ScoredPolicy;
  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    return group_column_sums(layer, /*mean=*/true);
  }
};

// Accumulated scores of the entries each (layer, KV head) holds, handed from prefill to decode.
struct H2oScores {
  std::vector<std::vector<std::vector<float>>> accumulated;  // [layer][head][entry]
};

int recent_tokens(double ratio, int budget) {
  return std::clamp(static_cast<int>(ratio * budget), 0, budget);
}

class H2oDecodePrefill : public PrefillPolicy {
 public:
  H2oDecodePrefill(double recent_ratio, std::shared_ptr<H2oScores> state)
      : recent_ratio_(recent_ratio), state_(std::move(state)) {}
  std::string name() const override { return "h2o_decode"; }
  PolicyKind kind() const override { return PolicyKind::kDecodeEviction; }
  CaptureRequest capture() const override {
    CaptureRequest request;
    request.attention_column_sums = true;
    return request;
  }
  KeptIndices select(const PrefillView& view, int budget_tokens) const override {
    check_budget(name(), budget_tokens, std::max(budget_tokens, view.prompt_length()));
    const int recent = recent_tokens(recent_ratio_, budget_tokens);
    KeptIndices kept(view.layers.size());
    state_->accumulated.assign(view.layers.size(), {});
    for (size_t l = 0; l < view.layers.size(); ++l) {
      const LayerPrefillView& layer = view.layers[l];
      const auto scores = group_column_sums(layer, /*mean=*/false);
      for (int h = 0; h < layer.n_kv_heads; ++h) {
        kept[l].push_back(keep_top(scores[h], budget_tokens, 0, recent));
        std::vector<float> survivors;
        for (int32_t j : kept[l].back()) survivors.push_back(scores[h][j]);
        state_->accumulated[l].push_back(std::move(survivors));
      }
    }
    return kept;
  }

 private:
  double recent_ratio_;
  std::shared_ptr<H2oScores> state_;
};

class H2oDecodeEviction : public DecodeEvictionPolicy {
 public:
  H2oDecodeEviction(double recent_ratio, std::shared_ptr<H2oScores> state)
      : recent_ratio_(recent_ratio), state_(std::move(state)) {}
  std::string name() const override { return "h2o_decode"; }
  void start(const KvStore& store, int, int budget_tokens) override {
    budget_ = budget_tokens;
    recent_ = recent_tokens(recent_ratio_, budget_tokens);
    auto& acc = state_->accumulated;
    acc.resize(store.n_layers());
    for (int l = 0; l < store.n_layers(); ++l) {
      acc[l].resize(store.n_kv_heads());
      for (int h = 0; h < store.n_kv_heads(); ++h) acc[l][h].resize(store.length(l, h), 0.0f);
    }
  }
  void after_step(const DecodeStepView& step, KvStore& store) override {
    const int n_kv = store.n_kv_heads();
    const int group = static_cast<int>(step.probabilities.size()) / n_kv;
    for (int h = 0; h < n_kv; ++h) {
      std::vector<float>& scores = state_->accumulated[step.layer][h];
      const int length = store.length(step.layer, h);
      scores.resize(length, 0.0f);  // the new token starts from the attention it gets now
      for (int a = h * group; a < (h + 1) * group; ++a)
        for (int j = 0; j < length; ++j) scores[j] += step.probabilities[a][j];
      if (length <= budget_) continue;
      const auto kept = keep_top(scores, budget_, 0, recent_);
      evict_except(store, step.layer, h, kept);
      std::vector<float> survivors;
      for (int32_t j : kept) survivors.push_back(scores[j]);
      scores = std::move(survivors);
    }
  }
  // The device form: the same accumulation and rule, starting from the prefill's sums.
  bool runs_on_device() const override { return true; }
  std::optional<DeviceEvictionSpec> device_eviction(int n_layers,
                                                    int budget_tokens) const override {
    DeviceEvictionSpec spec;
    spec.statistic = DeviceEvictionSpec::Statistic::kAccumulatedGroupSum;
    spec.keep.assign(n_layers, budget_tokens);
    spec.recent = recent_tokens(recent_ratio_, budget_tokens);
    spec.initial = state_->accumulated;
    return spec;
  }

 private:
  double recent_ratio_;
  std::shared_ptr<H2oScores> state_;
  int budget_ = 0, recent_ = 0;
};

}  // namespace

PolicyFactory h2o_factory() {
  return fixed_capture_factory<H2oPrefillPolicy>(
      {"h2o",
       PolicyKind::kPrefillQueryAware,
       "heavy hitters by prefill attention column sums + window (prefill port)",
       "KVCache-Factory@5fb995d H2OKVCluster; FMInference/H2O",
       {{"window", 8}, {"dense_layers", nlohmann::json::array()}}},
      capture_only(&CaptureRequest::attention_column_sums));
}

PolicyFactory h2o_decode_factory() {
  PolicyFactory factory;
  factory.info = {"h2o_decode",
                  PolicyKind::kDecodeEviction,
                  "heavy hitters by accumulated attention + recent, evicting every decode step",
                  "FMInference/H2O h2o_hf/utils_real_drop/modify_llama.py",
                  {{"recent_ratio", 0.5}}};
  factory.install = [defaults = factory.info.default_params](const nlohmann::json& given,
                                                             CachePlan& plan) {
    const PolicyParams params("h2o_decode", given, defaults);
    const double ratio = params.number("recent_ratio");
    if (ratio < 0 || ratio > 1)
      throw InputError("parameter 'recent_ratio' of h2o_decode must be in [0, 1]");
    auto state = std::make_shared<H2oScores>();
    plan.prefill = std::make_shared<H2oDecodePrefill>(ratio, state);
    plan.decode_eviction = std::make_shared<H2oDecodeEviction>(ratio, state);
  };
  return factory;
}

}  // namespace kvb
