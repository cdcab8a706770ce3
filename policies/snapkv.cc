// SnapKV (Li et al. 2024) — kind A, prefill eviction once after prefill.
//
//   s_a[j] = Σ_{t<w} A_a[t, j]  (j < L − w; softmax over all keys visible to window query t)
//   s̃_a   = pool_k(s_a) over the prefix only;   ŝ_h = mean over the GQA group of s̃_a
//   keep top (C − w) prefix tokens by ŝ_h, plus the w window tokens.
//
// Source: FasterDecoding/SnapKV @395b54d `snapkv/monkeypatch/snapkv_utils.py`; kvpress @8bb29b9
// `snapkv_press.py` (docs/methods.md §1). Defaults (official `init_snapkv`): w = 32, k = 5, avg
// pooling, sum over window rows, bf16 casts of the reference (precision "bf16"). GQA: the official
// code keeps per query head (no GQA saving); here the group mean is taken after pooling (kvpress),
// or before with gqa_before_pooling (identical for avg pooling). Budget C per (layer, KV head)
// **includes** the window; uniform over layers and heads. Ties: lower position first.
#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

class SnapKvPolicy : public ScoredPolicy {
 public:
  SnapKvPolicy(ScoredSettings settings, WindowScoreOptions options)
      : ScoredPolicy(std::move(settings)), options_(options) {}
  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    return window_attention_scores(layer, options_);
  }

 private:
  WindowScoreOptions options_;
};

}  // namespace

nlohmann::json snapkv_defaults() {
  return {{"window", 32},
          {"kernel", 5},
          {"pooling", "avg"},
          {"aggregate", "sum"},
          {"precision", "bf16"},
          {"gqa_reduce", "mean"},
          {"gqa_before_pooling", false},
          {"dense_layers", nlohmann::json::array()},
          {"budget_includes_window", true}};
}

WindowScoreOptions read_window_score_options(const PolicyParams& params) {
  WindowScoreOptions options;
  options.window = params.integer("window");
  options.kernel = params.integer("kernel");
  options.pooling = parse_pooling(params.choice("pooling", {"avg", "max"}));
  options.mean_over_rows = params.choice("aggregate", {"sum", "mean"}) == "mean";
  options.precision = parse_precision(params.choice("precision", {"bf16", "fp32"}));
  options.group_reduce = parse_group_reduce(params.choice("gqa_reduce", {"mean", "max"}));
  options.reduce_group_before_pooling = params.boolean("gqa_before_pooling");
  return options;
}

ScoredSettings window_scored_settings(const PolicyParams& params,
                                      const WindowScoreOptions& options) {
  ScoredSettings settings = read_scored_settings(params, PolicyKind::kPrefillQueryAware);
  settings.capture = window_attention_capture(options);
  return settings;
}

PolicyFactory snapkv_factory() {
  return scored_factory(
      {"snapkv", PolicyKind::kPrefillQueryAware, "window-query attention, pooled, top-k + window",
       "FasterDecoding/SnapKV@395b54d snapkv_utils.py; kvpress@8bb29b9 snapkv_press.py",
       snapkv_defaults()},
      [](const PolicyParams& params) {
        const WindowScoreOptions options = read_window_score_options(params);
        return std::make_shared<SnapKvPolicy>(window_scored_settings(params, options), options);
      });
}

}  // namespace kvb
