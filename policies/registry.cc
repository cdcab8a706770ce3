#include "policies/registry.h"

#include <algorithm>
#include <set>

#include "common/errors.h"
#include "policies/binarypc_projection.h"
#include "policies/methods.h"
#include "policies/scored_policy.h"

namespace kvb {
namespace {

// The factory table: one line per method.
const std::vector<PolicyFactory>& factories() {
  static const std::vector<PolicyFactory> table = {
      full_factory(),          streamingllm_factory(), snapkv_factory(),   pyramidkv_factory(),
      h2o_factory(),           h2o_decode_factory(),   tova_factory(),     knorm_factory(),
      keydiff_factory(),       cake_factory(),         adakv_factory(),    criticalkv_factory(),
      criticaladakv_factory(), andpro_factory(),       dropkv_factory(),   adadropkv_factory(),
      topk_factory(),          quest_factory(),        magicpig_factory(), binarypc_factory(),
      art_factory(),
  };
  return table;
}

// The factory of `name`, nullptr when there is none.
const PolicyFactory* lookup(const std::string& name) {
  for (const auto& factory : factories())
    if (factory.info.name == name) return &factory;
  return nullptr;
}

// The names of the methods `keep` accepts, comma-separated, in table order.
template <class Keep>
std::string names_where(Keep keep) {
  std::string names;
  for (const auto& factory : factories())
    if (keep(factory)) names += (names.empty() ? "" : ", ") + factory.info.name;
  return names;
}

std::string known_names() {
  return names_where([](const PolicyFactory&) { return true; });
}

std::vector<std::string> split_spec(const std::string& spec) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = spec.find('+', begin);
    std::string part =
        spec.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    if (part.empty())
      throw InputError("policy '" + spec + "' has an empty component; write e.g. snapkv+art");
    parts.push_back(part);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return parts;
}

// The parameters of one component of a composition.
nlohmann::json component_params(const std::vector<std::string>& parts, size_t index,
                                const nlohmann::json& params) {
  if (parts.size() == 1) return params;
  if (params.is_null() || params.empty()) return nlohmann::json::object();
  if (!params.is_object())
    throw InputError("parameters must be a JSON object, got " + params.dump());
  for (const auto& [key, value] : params.items())
    if (std::find(parts.begin(), parts.end(), key) == parts.end())
      throw InputError("parameter key '" + key + "' names no component of the composition; " +
                       "pass parameters per component, e.g. {\"" + parts[0] + "\": {...}}");
  return params.contains(parts[index]) ? params.at(parts[index]) : nlohmann::json::object();
}

}  // namespace

std::vector<PolicyInfo> list_policies() {
  std::vector<PolicyInfo> infos;
  for (const auto& factory : factories()) infos.push_back(factory.info);
  return infos;
}

const PolicyFactory& find_policy(const std::string& name) {
  if (const PolicyFactory* factory = lookup(name)) return *factory;
  throw InputError("unknown policy '" + name + "' (known: " + known_names() + ")");
}

std::shared_ptr<const ScoredPolicy> make_scorer(const std::string& name,
                                                const nlohmann::json& params) {
  const PolicyFactory& factory = find_policy(name);
  if (!factory.make_scorer) {
    const std::string scorers =
        names_where([](const PolicyFactory& f) { return static_cast<bool>(f.make_scorer); });
    throw InputError("policy '" + name +
                     "' is not a token scorer that can be wrapped (scorers: " + scorers + ")");
  }
  return factory.make_scorer(params);
}

std::shared_ptr<const BinaryProjectionSet> PlanFiles::binarypc_projection(const std::string& path) {
  const auto found = projections_.find(path);
  if (found != projections_.end()) return found->second;
  auto projection = std::make_shared<const BinaryProjectionSet>(BinaryProjectionSet::load(path));
  projections_.emplace(path, projection);
  return projection;
}

void PlanFiles::give_tensor(const std::string& name, GivenTensor tensor) {
  given_[name] = std::move(tensor);
}

const GivenTensor* PlanFiles::given_tensor(const std::string& name) const {
  const auto found = given_.find(name);
  return found == given_.end() ? nullptr : &found->second;
}

bool policy_takes_budget(const std::string& spec) {
  std::vector<std::string> parts;
  try {
    parts = split_spec(spec);
  } catch (const InputError&) {
    return true;
  }
  for (const std::string& part : parts) {
    const PolicyFactory* factory = lookup(part);
    if (!factory) return true;
    if (!factory->keeps_whole_cache && factory->info.kind != PolicyKind::kKernelWalk) return true;
  }
  return false;
}

std::vector<TensorInput> policy_tensor_inputs(const std::string& spec) {
  std::vector<TensorInput> inputs;
  try {
    for (const std::string& part : split_spec(spec))
      if (const PolicyFactory* factory = lookup(part))
        inputs.insert(inputs.end(), factory->tensor_inputs.begin(), factory->tensor_inputs.end());
  } catch (const InputError&) {
  }
  return inputs;
}

std::string decode_selector_names() {
  return names_where([](const PolicyFactory& f) { return static_cast<bool>(f.make_selector); });
}

CachePlan make_cache_plan(const std::string& spec, const nlohmann::json& params,
                          std::optional<Budget> budget, PlanFiles* files) {
  const std::vector<std::string> parts = split_spec(spec);
  PlanFiles files_of_this_plan;
  PlanFiles& plan_files = files ? *files : files_of_this_plan;
  CachePlan plan;
  plan.label = spec;
  plan.budget = budget;
  int evicting_components = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PolicyFactory& factory = find_policy(parts[i]);
    if (factory.info.kind != PolicyKind::kKernelWalk && ++evicting_components > 1)
      throw InputError("policy '" + spec + "' composes two eviction/selection methods; combine " +
                       "one of them with kernel-walk modifiers only (e.g. snapkv+art)");
    const nlohmann::json component = component_params(parts, i, params);
    // Without a budget the parameters are still checked; the missing budget is reported below.
    if (factory.make_selector)
      plan.selector = factory.make_selector(component, budget.value_or(Budget{}), plan_files);
    else
      factory.install(component, plan);
  }
  if (budget && budget->value <= 0)
    throw InputError("budget " + budget->to_string() + " must be > 0");
  const bool needs_budget = plan.prefill || plan.decode_eviction || plan.selector;
  if (needs_budget && !budget)
    throw InputError("policy '" + spec + "' needs a budget (e.g. --budget 512 or --budget 10%)");
  return plan;
}

CachePlan make_cache_plan(const PlanSpec& spec, PlanFiles* files) {
  return make_cache_plan(spec.policy, spec.params, spec.budget, files);
}

}  // namespace kvb
