// PyramidKV (Cai et al. 2024) — kind A. SnapKV's score (window-row sum, pooled over the prefix);
// only the per-layer budget changes: shallow layers keep more.
//
// Official integer schedule (KVCache-Factory PyramidKVCluster), N layers, C = budget incl. window,
// b = C − w:
//   min = ⌊b/β⌋, max = 2b − min;  if max ≥ L − w: max = L − w, min = 2b − max
//   steps = ⌊(max − min)/(N − 1)⌋;  layer ℓ keeps (max − ℓ·steps) prefix tokens + w window tokens
// Fallbacks: L < C → no compression; L < 2b → uniform SnapKV with b prefix tokens per layer.
//
// Source: Zefan-Cai/KVCache-Factory @5fb995d `pyramidkv/pyramidkv_utils.py` (docs/methods.md §2).
// Defaults (KVCache-Factory run scripts): β = 20, w = 8, k = 7, max pooling, sum over rows.
// GQA: group mean of the scores (KV-head mode). Budget: per (layer, KV head) on average, includes
// w.
#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {

std::vector<int> pyramid_layer_budgets(int budget, int window, int beta, int n_layers, int length) {
  const int b = budget - window;
  std::vector<int> budgets(n_layers, budget);
  if (length < budget || b <= 0 || length < 2 * b || n_layers < 2) return budgets;
  int min_num = b / beta;
  int max_num = 2 * b - min_num;
  if (max_num >= length - window) {
    max_num = length - window;
    min_num = 2 * b - max_num;
  }
  const int steps = (max_num - min_num) / (n_layers - 1);
  for (int l = 0; l < n_layers; ++l) budgets[l] = max_num - l * steps + window;
  return budgets;
}

namespace {

class PyramidKvPolicy : public ScoredPolicy {
 public:
  PyramidKvPolicy(ScoredSettings settings, WindowScoreOptions options, int beta)
      : ScoredPolicy(std::move(settings)), options_(options), beta_(beta) {}
  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    return window_attention_scores(layer, options_);
  }
  std::vector<int> layer_budgets(const PrefillView& view, int budget_tokens) const override {
    return pyramid_layer_budgets(budget_tokens, settings().window, beta_,
                                 static_cast<int>(view.layers.size()), view.prompt_length());
  }

 private:
  WindowScoreOptions options_;
  int beta_;
};

}  // namespace

PolicyFactory pyramidkv_factory() {
  nlohmann::json defaults = snapkv_defaults();
  defaults.update({{"window", 8},
                   {"kernel", 7},
                   {"pooling", "max"},
                   {"beta", 20},
                   {"gqa_before_pooling", true}});
  return scored_factory(
      {"pyramidkv", PolicyKind::kPrefillQueryAware, "SnapKV score, pyramid layer budgets (β = 20)",
       "Zefan-Cai/KVCache-Factory@5fb995d pyramidkv/pyramidkv_utils.py", defaults},
      [](const PolicyParams& params) {
        const int beta = params.integer("beta");
        if (beta < 1) throw InputError("parameter 'beta' of pyramidkv must be >= 1");
        const WindowScoreOptions options = read_window_score_options(params);
        return std::make_shared<PyramidKvPolicy>(window_scored_settings(params, options), options,
                                                 beta);
      });
}

}  // namespace kvb
