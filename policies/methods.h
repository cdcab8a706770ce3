// One factory per method, each defined in the method's own file (policies/<name>.cc), plus the few
// pieces that wrapper methods share (SnapKV's parameters, AdaKV's allocation, CriticalKV's
// projected value norms).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "policies/registry.h"

namespace kvb {

PolicyFactory full_factory();
PolicyFactory streamingllm_factory();
PolicyFactory snapkv_factory();
PolicyFactory pyramidkv_factory();
PolicyFactory h2o_factory();
PolicyFactory h2o_decode_factory();
PolicyFactory tova_factory();
PolicyFactory knorm_factory();
PolicyFactory keydiff_factory();
PolicyFactory cake_factory();
PolicyFactory adakv_factory();
PolicyFactory criticalkv_factory();
PolicyFactory criticaladakv_factory();
PolicyFactory andpro_factory();
PolicyFactory dropkv_factory();
PolicyFactory adadropkv_factory();
PolicyFactory topk_factory();
PolicyFactory quest_factory();
PolicyFactory magicpig_factory();
PolicyFactory binarypc_factory();
PolicyFactory art_factory();

class PolicyParams;
class ScoredPolicy;
struct LayerPrefillView;
struct WindowScoreOptions;

// SnapKV's parameters with their defaults, shared by the SnapKV family (PyramidKV, AdaKV).
nlohmann::json snapkv_defaults();
WindowScoreOptions read_window_score_options(const PolicyParams& params);
// The shared settings of a method scored by window_attention_scores (its capture: the window
// sums, not the prompt's keys).
struct ScoredSettings;
ScoredSettings window_scored_settings(const PolicyParams& params,
                                      const WindowScoreOptions& options);
nlohmann::json dropkv_defaults();

// CAKE's budget adjustment: prefix tokens per layer from the layer preferences P_ℓ.
std::vector<int> cake_layer_budgets(const std::vector<double>& preference, int budget, int window,
                                    int length);

// PyramidKV's official integer layer schedule (tokens per head per layer, window included).
std::vector<int> pyramid_layer_budgets(int budget, int window, int beta, int n_layers, int length);

struct AdaKvOptions {
  double alpha = 0.2;
  bool normalize = false;
  bool kvpress_allocation = false;  // exact total (AdaKVPress) instead of the official rounding
  bool critical = false;            // CriticalAdaKV: two-stage selection inside the head budgets
  double first_stage_ratio = 0.5;
  double epsilon = 1e-4;
};
// Head budgets B_h from per-head candidate scores (protected tokens excluded) at B per head.
std::vector<int> adakv_head_budgets(const std::vector<std::vector<float>>& candidate_scores,
                                    int per_head_budget, const AdaKvOptions& options);
std::shared_ptr<const ScoredPolicy> make_adakv(std::string name,
                                               std::shared_ptr<const ScoredPolicy> scorer,
                                               AdaKvOptions options);
PolicyFactory adakv_family_factory(const std::string& name, const std::string& summary,
                                   const std::string& scorer, const nlohmann::json& scorer_defaults,
                                   const nlohmann::json& overrides, bool selectable, bool critical);

// CriticalKV: ν_j = (1/g) Σ_{a∈group(h)} ‖v_j W_o^a‖₁ for every position j of KV head h.
std::vector<float> projected_value_norms(const LayerPrefillView& layer, int kv_head);
// Top `keep` candidates: the first `forced` by base score, the rest by (score + ε)·ν.
std::vector<int32_t> critical_top(const std::vector<float>& scores, const std::vector<float>& nu,
                                  int keep, int forced, double epsilon);

}  // namespace kvb
