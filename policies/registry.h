// The policy registry: every method by name, its kind, a one-line summary, its source and its
// default parameters; and `make_cache_plan`, which turns a policy string ("snapkv",
// "snapkv+art", "adakv") plus JSON parameters into what one generation run uses.
//
// Adding a method = its file (defining `<name>_factory()`), one line in policies/methods.h, one
// line in the table of registry.cc, a test, a README row.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/cache_policy.h"

namespace kvb {

class ScoredPolicy;
struct BinaryProjectionSet;

// A row-major f32 tensor handed to plans in place of a file (see TensorInput).
struct GivenTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Files that plans read, each read once and shared by every plan built with the same PlanFiles:
// a sweep builds a plan per cell and run, and BinaryPC's OPC projection (its "projection"
// parameter) is one file for all of them. Owned by whoever builds the plans; not thread-safe.
class PlanFiles {
 public:
  // The projection file at `path`, read on first use (InputError / FormatError as
  // BinaryProjectionSet::load).
  std::shared_ptr<const BinaryProjectionSet> binarypc_projection(const std::string& path);
  int files_read() const { return static_cast<int>(projections_.size()); }

  // A tensor given under the name a method declared (PolicyFactory::tensor_inputs); the plans
  // built with these files take it instead of reading the file of the parameter it replaces.
  void give_tensor(const std::string& name, GivenTensor tensor);
  // nullptr when none was given under `name`.
  const GivenTensor* given_tensor(const std::string& name) const;

 private:
  std::map<std::string, std::shared_ptr<const BinaryProjectionSet>> projections_;
  std::map<std::string, GivenTensor> given_;
};

// A tensor that `kvbench select` may give a method in place of a file its parameters name, read
// from the select inputs when present. The method declares it in its registry entry, so that the
// harness hands it over without naming the method.
struct TensorInput {
  std::string tensor;     // its name in the inputs file and in PlanFiles::given_tensor
  std::string parameter;  // the file parameter it replaces
  std::string shape;      // for help and messages, e.g. "[layers, Hkv, 64, d]"
};

struct PolicyInfo {
  std::string name;
  PolicyKind kind = PolicyKind::kPrefillQueryAware;
  std::string summary;
  std::string source;             // official code read (repository @commit, file)
  nlohmann::json default_params;  // every parameter the method accepts, with its default
};

struct PolicyFactory {
  PolicyInfo info;
  // Fills the members of `plan` this method provides, from the user's parameters (unknown keys
  // and wrong types are InputErrors).
  std::function<void(const nlohmann::json& params, CachePlan& plan)> install;
  // For score-based prefill methods only: the scorer alone, for wrappers such as AdaKV.
  std::function<std::shared_ptr<const ScoredPolicy>(const nlohmann::json& params)> make_scorer;
  // For decode selectors (kind D) instead of `install`: the plan's selector, from the user's
  // parameters, the plan's budget and the files plans share (policies/decode_selector_common.h).
  std::function<std::shared_ptr<DecodeSelector>(const nlohmann::json& params, const Budget& budget,
                                                PlanFiles& files)>
      make_selector;
  // True for the baseline that keeps the whole cache ("full"): it takes no budget, and neither
  // does its composition with kernel-walk modifiers ("full+art"), which never take one.
  bool keeps_whole_cache = false;
  // Tensors the method takes in place of a file parameter (kvbench select), usually none.
  std::vector<TensorInput> tensor_inputs;
};

std::vector<PolicyInfo> list_policies();

// Throws InputError naming the unknown policy and listing the known ones.
const PolicyFactory& find_policy(const std::string& name);

// A score-based prefill method by name (for wrappers); InputError if `name` is not one.
std::shared_ptr<const ScoredPolicy> make_scorer(const std::string& name,
                                                const nlohmann::json& params);

// Whether the policy spec (a name or a '+'-composition) takes a budget: false when every component
// keeps the whole cache or is a kernel-walk modifier ("full", "full+art"). A spec with an unknown
// or empty component counts as taking one; building its plan names the error.
bool policy_takes_budget(const std::string& spec);

// The tensor inputs every component of `spec` declares (none for an unknown component; building
// its plan names the error).
std::vector<TensorInput> policy_tensor_inputs(const std::string& spec);

// The names of the decode selectors (kind D), for messages.
std::string decode_selector_names();

// What one cache plan is built from. `policy` is a name or a '+'-composition; `budget` is absent
// for budget-less policies ("full", "full+art").
struct PlanSpec {
  std::string policy;
  nlohmann::json params = nlohmann::json::object();
  std::optional<Budget> budget;
};

// `spec` is a policy name or a '+'-composition ("snapkv+art", "full+art"). With one component the
// parameters are that method's; with several they are keyed by component
// ({"snapkv": {...}, "art": {...}}). A method that evicts or selects needs a budget. Files the
// plan reads come from `files` when given (read once across plans), else are read for this plan.
CachePlan make_cache_plan(const std::string& spec, const nlohmann::json& params,
                          std::optional<Budget> budget, PlanFiles* files = nullptr);
CachePlan make_cache_plan(const PlanSpec& spec, PlanFiles* files = nullptr);

}  // namespace kvb
