// Base of the score-then-keep methods (SnapKV, PyramidKV, H2O, KNorm, DropKV, ...): a method
// supplies one score per (KV head, prompt position) and optionally a per-layer budget schedule;
// selection, protected tokens, dense layers and budget checks live here once. A method file is then
// its parameters plus `score()`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "engine/cache_policy.h"
#include "policies/params.h"
#include "policies/registry.h"

namespace kvb {

struct ScoredSettings {
  std::string name;
  PolicyKind kind = PolicyKind::kPrefillQueryAware;
  int window = 0;                 // last positions always kept, counted inside the budget
  int sinks = 0;                  // first positions always kept, counted inside the budget
  std::vector<int> dense_layers;  // layers left uncompressed
  CaptureRequest capture;         // what score() reads from the prefill
  // Decode-time evicting methods (H2O, TOVA, CAKE) accept a budget above the prompt length: the
  // prefill then keeps everything and the cache grows until it reaches the budget.
  bool budget_may_exceed_prompt = false;
  // Whether the protected tokens (window, sinks) count inside the per-head budget (the official
  // accounting of every method here); false keeps budget + protected tokens.
  bool budget_includes_window = true;
};

// Reads the shared parameters a method declares ("window", "sinks", "dense_layers",
// "budget_includes_window"); a window declared by a query-aware method also becomes its capture
// request, which asks for the prompt's keys and values (a method whose score needs only device
// statistics replaces that by the statistics it reads).
ScoredSettings read_scored_settings(const PolicyParams& params, PolicyKind kind);

class ScoredPolicy : public PrefillPolicy {
 public:
  explicit ScoredPolicy(ScoredSettings settings) : settings_(std::move(settings)) {}

  std::string name() const override { return settings_.name; }
  PolicyKind kind() const override { return settings_.kind; }
  CaptureRequest capture() const override { return settings_.capture; }
  const ScoredSettings& settings() const { return settings_; }

  // Per KV head, one score per prompt position (higher = more worth keeping). Scores at protected
  // positions (sinks, window) are ignored by the selection.
  virtual std::vector<std::vector<float>> score(const LayerPrefillView& layer) const = 0;

  // Tokens kept per head in each layer, protected tokens included. Default: `budget_tokens` for
  // every layer (uniform). A value >= L leaves the layer uncompressed.
  virtual std::vector<int> layer_budgets(const PrefillView& view, int budget_tokens) const;

  KeptIndices select(const PrefillView& view, int budget_tokens) const override;

 protected:
  // The kept sets of one layer given its budget (the default keeps each head's top scores).
  virtual std::vector<std::vector<int32_t>> select_layer(const LayerPrefillView& layer,
                                                         int layer_budget) const;

 private:
  ScoredSettings settings_;
};

// Registry entry of a scored method: `build` turns checked parameters into the policy. The same
// builder serves `install` (the method on its own) and `make_scorer` (inside AdaKV / CriticalKV).
using ScoredBuilder = std::function<std::shared_ptr<const ScoredPolicy>(const PolicyParams&)>;
PolicyFactory scored_factory(PolicyInfo info, ScoredBuilder build);

// A request for the one statistic `flag` of the prefill, for a method whose score reads nothing
// else.
inline CaptureRequest capture_only(bool CaptureRequest::*flag) {
  CaptureRequest request;
  request.*flag = true;
  return request;
}

// The entry of a method built from the shared parameters alone, whose score reads exactly `capture`
// of the prefill (in place of the request read_scored_settings derives from its kind and window).
template <class Policy>
PolicyFactory fixed_capture_factory(PolicyInfo info, CaptureRequest capture) {
  const PolicyKind kind = info.kind;
  return scored_factory(std::move(info), [kind, capture](const PolicyParams& params) {
    ScoredSettings settings = read_scored_settings(params, kind);
    settings.capture = capture;
    return std::make_shared<Policy>(std::move(settings));
  });
}

}  // namespace kvb
