// CAKE (Qin et al. 2025) — kind A + C: layer budgets from prefill attention statistics, then (the
// official default) one eviction per decode step to hold each layer at its budget.
//
// Per layer ℓ, from the window attention A (w rows; Ā = A[:, j < L−w], rows not renormalised):
//   H_ℓ = −Σ Ā·log(Ā + 1e−10)               (all query heads, rows, prefix keys)
//   V_ℓ = Σ_{a,j} Var_t Ā[a,t,j]             (unbiased variance over the window rows)
//   P_ℓ = H_ℓ^{1/τ1} · V_ℓ^{1/τ2}
// Budgets: T = (S − w)·N; B_ℓ = int(P_ℓ/ΣP · T); cap at L − w and share the excess evenly among the
// layers below the cap (remainder to the earliest; not re-capped); correct the total back to T the
// same way (adding: layers below L − w; subtracting: layers above 1); at eviction B_ℓ ≥ L − w
// becomes L − w. Compression runs only if L > S + w.
// Kept tokens: I_a[j] = mean_t A[t,j] + γ·Var_t A[t,j] (j < L−w), avg-pool k = 5, group mean; keep
// the top B_ℓ plus the window.
// Decode (decode_eviction, official default on): once layer ℓ holds more than B_ℓ + w tokens, score
// the new query's attention row without its last w columns the same way (avg-pool, group mean)
// and keep the top B_ℓ plus the last w. Without prefill compression B_ℓ = S − w. On a device engine
// the decode step evicts the same way (engine/device_eviction.h, kPooledGroupMean, keep = B_ℓ + w,
// the last w protected).
//
// Source: antgroup/cakekv @c4675ce `cake/model/modify_llama.py`, `cake/cake_cache.py`,
// `cake/utils.py` (adjust_budgets, calculate_entropy) (docs/methods.md §6). Defaults
// (`pred_cake.py`): w = 32, γ = 200, τ1 = τ2 = 1 (the fallback; model2tau.json gives per-model
// values), k = 5, precision bf16. Budget S per (layer, KV head) on average, window included;
// uniform across the heads of a layer. Non-cascading only (cascading re-evicts during prefill; not
// built).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {

// CAKE's budget adjustment (cake/utils.py adjust_budgets), exposed for tests.
std::vector<int> cake_layer_budgets(const std::vector<double>& preference, int budget, int window,
                                    int length) {
  const int n = static_cast<int>(preference.size());
  const long long total = static_cast<long long>(budget - window) * n;
  const int cap = length - window;
  const double sum = std::accumulate(preference.begin(), preference.end(), 0.0);
  std::vector<long long> b(n);
  for (int l = 0; l < n; ++l)
    b[l] = (sum > 0 && std::isfinite(sum)) ? static_cast<long long>(preference[l] / sum * total)
                                           : total / n;
  // Share `amount` (> 0 adds, < 0 subtracts) evenly over the eligible layers, remainder first.
  auto share = [&](long long amount, auto eligible) {
    std::vector<int> layers;
    for (int l = 0; l < n; ++l)
      if (eligible(b[l])) layers.push_back(l);
    if (layers.empty() || amount == 0) return;
    const long long count = static_cast<long long>(layers.size());
    const long long magnitude = std::llabs(amount), each = magnitude / count,
                    rest = magnitude % count;
    const long long sign = amount > 0 ? 1 : -1;
    for (long long i = 0; i < count; ++i) b[layers[i]] += sign * (each + (i < rest ? 1 : 0));
  };
  long long excess = 0;
  for (auto& x : b)
    if (x > cap) excess += x - cap, x = cap;
  share(excess, [&](long long x) { return x < cap; });
  const long long diff = total - std::accumulate(b.begin(), b.end(), 0LL);
  if (diff > 0) share(diff, [&](long long x) { return x < cap; });
  if (diff < 0) share(diff, [&](long long x) { return x > 1; });
  std::vector<int> out(n);
  for (int l = 0; l < n; ++l) out[l] = static_cast<int>(std::clamp<long long>(b[l], 0, cap));
  return out;
}

namespace {

struct CakeState {
  std::vector<int> prefix_budgets;  // B_ℓ per layer, set by the prefill selection
};

struct LayerStatistics {
  double entropy = 0, variance = 0;
  std::vector<std::vector<float>> indicator;  // per KV head, length L (window entries 0)
};

class CakePolicy : public ScoredPolicy {
 public:
  CakePolicy(ScoredSettings settings, int kernel, double gamma, double tau1, double tau2,
             Precision precision, std::shared_ptr<CakeState> state)
      : ScoredPolicy(std::move(settings)),
        kernel_(kernel),
        gamma_(gamma),
        tau1_(tau1),
        tau2_(tau2),
        precision_(precision),
        state_(std::move(state)) {}

  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    return statistics(layer).indicator;
  }

  KeptIndices select(const PrefillView& view, int budget) const override {
    const int length = view.prompt_length();
    check_budget(name(), budget,
                 settings().budget_may_exceed_prompt ? std::max(budget, length) : length);
    const int n_layers = static_cast<int>(view.layers.size());
    const int w = std::min(settings().window, length);
    KeptIndices kept(n_layers);
    state_->prefix_budgets.assign(n_layers, std::max(0, budget - w));
    if (length <= budget + w) {  // official trigger: compress only if L > S + w
      for (int l = 0; l < n_layers; ++l)
        kept[l].assign(view.layers[l].n_kv_heads, keep_all(length));
      return kept;
    }
    std::vector<LayerStatistics> stats(n_layers);
    std::vector<double> preference(n_layers);
    for (int l = 0; l < n_layers; ++l) {
      stats[l] = statistics(view.layers[l]);
      preference[l] =
          std::pow(stats[l].entropy, 1.0 / tau1_) * std::pow(stats[l].variance, 1.0 / tau2_);
    }
    state_->prefix_budgets = cake_layer_budgets(preference, budget, w, length);
    for (int l = 0; l < n_layers; ++l) {
      const LayerPrefillView& layer = view.layers[l];
      if (is_dense_layer(settings().dense_layers, layer.layer)) {
        kept[l].assign(layer.n_kv_heads, keep_all(length));
        continue;
      }
      for (int h = 0; h < layer.n_kv_heads; ++h)
        kept[l].push_back(keep_top(stats[l].indicator[h], state_->prefix_budgets[l] + w, 0, w));
    }
    return kept;
  }

 private:
  LayerStatistics statistics(const LayerPrefillView& layer) const {
    const int length = layer.length;
    const int w = effective_window(layer, settings().window);
    const int prefix = length - w;
    LayerStatistics stats;
    std::vector<std::vector<float>> per_query_head(layer.n_query_heads);
    for (int a = 0; a < layer.n_query_heads; ++a) {
      const auto probs = window_attention(layer, a, w, precision_);
      std::vector<float> indicator(prefix);
      for (int j = 0; j < prefix; ++j) {
        double mean = 0, squares = 0;
        for (int t = 0; t < w; ++t) {
          const double p = probs[static_cast<size_t>(t) * length + j];
          mean += p;
          stats.entropy -= p * std::log(p + 1e-10);
        }
        mean /= w;
        for (int t = 0; t < w; ++t) {
          const double diff = probs[static_cast<size_t>(t) * length + j] - mean;
          squares += diff * diff;
        }
        const float variance =
            maybe_bf16(w > 1 ? static_cast<float>(squares / (w - 1)) : 0.0f, precision_);
        stats.variance += variance;
        indicator[j] = maybe_bf16(maybe_bf16(static_cast<float>(mean), precision_) +
                                      maybe_bf16(static_cast<float>(gamma_) * variance, precision_),
                                  precision_);
      }
      per_query_head[a] = pool1d(indicator, kernel_, Pooling::kAvg, precision_);
    }
    stats.indicator = reduce_groups(per_query_head, layer.n_kv_heads, GroupReduce::kMean);
    for (auto& scores : stats.indicator) scores.resize(length, 0.0f);
    return stats;
  }

  int kernel_;
  double gamma_, tau1_, tau2_;
  Precision precision_;
  std::shared_ptr<CakeState> state_;
};

class CakeDecodeEviction : public DecodeEvictionPolicy {
 public:
  CakeDecodeEviction(int window, int kernel, Precision precision, std::vector<int> dense_layers,
                     std::shared_ptr<CakeState> state)
      : window_(window),
        kernel_(kernel),
        precision_(precision),
        dense_layers_(std::move(dense_layers)),
        state_(std::move(state)) {}
  std::string name() const override { return "cake"; }
  void start(const KvStore& store, int, int budget_tokens) override {
    if (static_cast<int>(state_->prefix_budgets.size()) != store.n_layers())
      state_->prefix_budgets.assign(store.n_layers(), std::max(0, budget_tokens - window_));
  }
  void after_step(const DecodeStepView& step, KvStore& store) override {
    if (is_dense_layer(dense_layers_, step.layer)) return;
    const int budget = state_->prefix_budgets[step.layer];
    const int n_kv = store.n_kv_heads();
    const int group = static_cast<int>(step.probabilities.size()) / n_kv;
    for (int h = 0; h < n_kv; ++h) {
      const int length = store.length(step.layer, h);
      if (length <= budget + window_) continue;
      const int prefix = length - window_;
      std::vector<std::vector<float>> rows;
      for (int a = h * group; a < (h + 1) * group; ++a) {
        std::vector<float> row(prefix);
        for (int j = 0; j < prefix; ++j) row[j] = maybe_bf16(step.probabilities[a][j], precision_);
        rows.push_back(pool1d(row, kernel_, Pooling::kAvg, precision_));
      }
      std::vector<float> scores = reduce_groups(rows, 1, GroupReduce::kMean)[0];
      scores.resize(length, 0.0f);
      evict_except(store, step.layer, h, keep_top(scores, budget + window_, 0, window_));
    }
  }
  // The device form: the same pooled group mean and rule with the prefill's layer budgets.
  bool runs_on_device() const override { return true; }
  std::optional<DeviceEvictionSpec> device_eviction(int n_layers,
                                                    int budget_tokens) const override {
    DeviceEvictionSpec spec;
    spec.statistic = DeviceEvictionSpec::Statistic::kPooledGroupMean;
    spec.pool_kernel = kernel_;
    spec.round_bf16 = precision_ == Precision::kBf16;
    spec.recent = window_;
    const bool set = static_cast<int>(state_->prefix_budgets.size()) == n_layers;
    for (int l = 0; l < n_layers; ++l) {
      const int prefix = set ? state_->prefix_budgets[l] : std::max(0, budget_tokens - window_);
      spec.keep.push_back(is_dense_layer(dense_layers_, l) ? -1 : prefix + window_);
    }
    return spec;
  }

 private:
  int window_, kernel_;
  Precision precision_;
  std::vector<int> dense_layers_;
  std::shared_ptr<CakeState> state_;
};

nlohmann::json cake_defaults() {
  return {{"window", 32},
          {"kernel", 5},
          {"gamma", 200.0},
          {"tau1", 1.0},
          {"tau2", 1.0},
          {"precision", "bf16"},
          {"decode_eviction", true},
          {"dense_layers", nlohmann::json::array()}};
}

}  // namespace

PolicyFactory cake_factory() {
  PolicyFactory factory;
  factory.info = {
      "cake", PolicyKind::kPrefillQueryAware,
      "layer budgets from attention entropy x variance; mean+var indicator; decode eviction",
      "antgroup/cakekv@c4675ce cake/cake_cache.py, cake/utils.py", cake_defaults()};
  auto build = [](const nlohmann::json& given, std::shared_ptr<CakeState> state) {
    const PolicyParams params("cake", given, cake_defaults());
    ScoredSettings settings = read_scored_settings(params, PolicyKind::kPrefillQueryAware);
    settings.budget_may_exceed_prompt = params.boolean("decode_eviction");
    return std::make_shared<CakePolicy>(
        settings, params.integer("kernel"), params.number("gamma"), params.number("tau1"),
        params.number("tau2"), parse_precision(params.choice("precision", {"bf16", "fp32"})),
        std::move(state));
  };
  factory.make_scorer =
      [build](const nlohmann::json& given) -> std::shared_ptr<const ScoredPolicy> {
    return build(given, std::make_shared<CakeState>());
  };
  factory.install = [build](const nlohmann::json& given, CachePlan& plan) {
    auto state = std::make_shared<CakeState>();
    plan.prefill = build(given, state);
    const PolicyParams params("cake", given, cake_defaults());
    if (params.boolean("decode_eviction"))
      plan.decode_eviction = std::make_shared<CakeDecodeEviction>(
          params.integer("window"), params.integer("kernel"),
          parse_precision(params.choice("precision", {"bf16", "fp32"})),
          params.integers("dense_layers"), state);
  };
  return factory;
}

}  // namespace kvb
