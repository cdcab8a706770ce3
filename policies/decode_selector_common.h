// Shared pieces of the kind-D decode selectors (TOPK, Quest, MagicPIG, BinaryPC): bounded
// parameters, GQA modes and the per-step budget (their top-k: kernels/cpu/topk_select.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cache_policy.h"
#include "policies/decode_selectors.h"
#include "policies/params.h"
#include "policies/registry.h"

namespace kvb {

// How a KV group's query heads share a selection (docs/methods.md §10, §14):
//   kPerHead - each query head picks its own set (the union is loaded; exact reference semantics)
//   kShared  - one set per KV head, scored over the whole group
enum class GqaSelection { kPerHead, kShared };

// Reads parameter "gqa" ("per_head" | "shared").
GqaSelection read_gqa_selection(const PolicyParams& params);
const char* gqa_selection_name(GqaSelection mode);

// An integer / number parameter that must be >= minimum (InputError naming it otherwise).
int integer_at_least(const PolicyParams& params, const std::string& name, int minimum);
double number_at_least(const PolicyParams& params, const std::string& name, double minimum);
// A list of layer indices >= 0.
std::vector<int> read_layers(const PolicyParams& params, const std::string& name);

// The device form every decode selector starts from: its scores, budget and dense layers.
DeviceSelectionSpec device_selection_of(DeviceSelectionSpec::Scores scores, int budget_tokens,
                                        const std::vector<int>& dense_layers);

// Tokens a selector may attend to at a step with `current_length` cached entries: fractions apply
// to the current length, token counts are fixed; at least 1, at most the current length.
int selection_budget(const Budget& budget, int current_length);

// Throws InputError when `out.indices` was not sized to the caller's query-head count, or the
// count is not a multiple of the store's KV heads.
int checked_query_heads(const Selection& out, const KvStore& store, const std::string& method);

// Base of the kind-D selectors, as ScoredPolicy is of the prefill scorers: the method's
// parameters (checked against its defaults), its budget and its dense layers are read here once,
// and describe() reports them. A selector file is then its own parameters, start(), on_append()
// and the selection of one layer.
class ParamDecodeSelector : public DescribedDecodeSelector {
 public:
  // Reads the "dense_layers" parameter, which every default set of a selector declares.
  ParamDecodeSelector(const std::string& method, const nlohmann::json& params,
                      const nlohmann::json& defaults, const Budget& budget);

  std::string name() const override { return params_.policy(); }
  // The resolved parameters, defaults included, and "budget".
  nlohmann::json describe() const override;

 protected:
  // What every select() does first: checks `out`'s size, clears the logit biases and marks a
  // dense layer. Returns the query heads per KV head, or 0 for a dense layer (nothing to select).
  int begin_selection(int layer, const KvStore& store, Selection& out) const;

  const PolicyParams params_;
  const Budget budget_;
  const std::vector<int> dense_layers_;
};

// What the registry lists of a kind-D method besides its defaults (PolicyInfo, whose kind is
// kDecodeSelection here).
struct SelectorInfo {
  std::string name;
  std::string summary;
  std::string source;  // official code read (repository @commit, file)
};

// A kind-D method's selector from its parameters and budget; `files` holds the files the plans of
// a sweep share (BinaryPC's projection).
using SelectorBuilder = std::function<std::shared_ptr<DescribedDecodeSelector>(
    const nlohmann::json& params, const Budget& budget, PlanFiles& files)>;
// The registry entry of a decode selector (policies/registry.h: make_selector), as scored_factory
// is for prefill scorers.
PolicyFactory decode_selector_factory(SelectorInfo info, nlohmann::json defaults,
                                      SelectorBuilder build);
// The same for a selector made from its parameters and budget alone (its make_<name>_selector of
// policies/decode_selectors.h).
using PlainSelectorMaker = std::shared_ptr<DescribedDecodeSelector> (*)(
    const nlohmann::json& params, const Budget& budget);
PolicyFactory decode_selector_factory(SelectorInfo info, nlohmann::json defaults,
                                      PlainSelectorMaker make);

}  // namespace kvb
