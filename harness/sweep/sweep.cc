#include "harness/sweep/sweep.h"

#include <cstdint>
#include <cstdlib>
#include <map>

#include "common/errors.h"
#include "harness/sweep/benchmark_data.h"

namespace kvb {

nlohmann::json Cell::to_json() const {
  // nlohmann::json objects keep keys sorted, so dump() is canonical.
  return {{"model", model},
          {"benchmark", benchmark},
          {"task", task},
          {"length", length},
          {"policy", policy},
          {"params", params},
          {"budget", budget_text()},
          {"prompt_mode", kvb::to_string(prompt_mode)},
          {"dense_layers", dense_layers},
          {"max_new_tokens", max_new_tokens}};
}

std::string Cell::key() const { return to_json().dump(); }

std::string Cell::budget_text() const { return budget ? budget->to_string() : ""; }

PlanSpec Cell::plan_spec() const {
  PlanSpec spec{policy, params, budget};
  // A composition's params are keyed by component, so the sweep-wide layers apply to one method.
  if (!dense_layers.empty() && policy.find('+') == std::string::npos) {
    const auto& defaults = find_policy(policy).info.default_params;
    if (defaults.contains("dense_layers") && !spec.params.contains("dense_layers"))
      spec.params["dense_layers"] = dense_layers;
  }
  return spec;
}

std::string Cell::policy_label() const {
  if (params.empty()) return policy;
  std::string label = policy + "(";
  bool first = true;
  for (const auto& [name, value] : params.items()) {
    label += (first ? "" : ",") + name + "=" +
             (value.is_string() ? value.get<std::string>() : value.dump());
    first = false;
  }
  return label + ")";
}

namespace {

// An int field of a stored cell; get<int>() of a float outside int's range is undefined behaviour.
int int_of(const nlohmann::json& value, const char* what) {
  if (!value.is_number_integer() || value.get<int64_t>() < INT32_MIN ||
      value.get<int64_t>() > INT32_MAX)
    throw FormatError(std::string("cell field '") + what + "' is not an integer: " + value.dump());
  return static_cast<int>(value.get<int64_t>());
}

}  // namespace

Cell cell_from_json(const nlohmann::json& json) {
  Cell cell;
  cell.model = json.at("model").get<std::string>();
  cell.benchmark = json.at("benchmark").get<std::string>();
  cell.task = json.at("task").get<std::string>();
  cell.length = int_of(json.at("length"), "length");
  cell.policy = json.at("policy").get<std::string>();
  cell.params = json.at("params");
  cell.budget = budget_from_text(json.at("budget").get<std::string>());
  cell.prompt_mode = parse_prompt_mode(json.at("prompt_mode").get<std::string>());
  const auto& dense = json.at("dense_layers");
  if (!dense.is_array())
    throw FormatError("cell field 'dense_layers' is not a list: " + dense.dump());
  for (const auto& layer : dense) cell.dense_layers.push_back(int_of(layer, "dense_layers"));
  cell.max_new_tokens = int_of(json.at("max_new_tokens"), "max_new_tokens");
  return cell;
}

std::optional<Budget> budget_from_text(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return Budget::parse(text);
}

Shard Shard::parse(const std::string& text) {
  const auto slash = text.find('/');
  const std::string fix = " (use --shard i/N with 0 <= i < N, e.g. --shard 0/4)";
  if (slash == std::string::npos) throw InputError("--shard '" + text + "' is not i/N" + fix);
  char* end = nullptr;
  const std::string first = text.substr(0, slash);
  const std::string second = text.substr(slash + 1);
  const long index = std::strtol(first.c_str(), &end, 10);
  if (first.empty() || *end != '\0') throw InputError("--shard '" + text + "': bad i" + fix);
  const long count = std::strtol(second.c_str(), &end, 10);
  if (second.empty() || *end != '\0') throw InputError("--shard '" + text + "': bad N" + fix);
  if (count < 1 || index < 0 || index >= count)
    throw InputError("--shard '" + text + "' is out of range" + fix);
  return Shard{static_cast<int>(index), static_cast<int>(count)};
}

int64_t SweepPlan::total_rows() const {
  int64_t rows = 0;
  for (const auto& unit : units) rows += static_cast<int64_t>(groups[unit.group].cells.size());
  return rows;
}

std::vector<SampleGroup> expand_groups(const SweepConfig& config) {
  std::vector<SampleGroup> groups;
  // Loaded tasks have as many samples as their file has records (capped by "samples").
  std::map<std::pair<std::string, std::string>, int> records;  // (data_dir, task) -> count
  auto samples_of = [&](const BenchmarkSpec& bench, const std::string& task) {
    if (!loads_from_files(bench, task)) return bench.samples;
    auto it = records.find({bench.data_dir, task});
    if (it == records.end())
      it = records.emplace(std::make_pair(bench.data_dir, task), count_data_records(bench, task))
               .first;
    return bench.samples_given ? std::min(bench.samples, it->second) : it->second;
  };
  for (const auto& model : config.models) {
    for (const auto& bench : config.benchmarks) {
      for (const auto& task : bench.tasks) {
        for (const int length : bench.lengths) {
          SampleGroup group;
          group.model = model.name;
          group.model_path = model.path;
          group.benchmark = bench;
          group.task = task;
          group.length = length;
          group.sample_count = samples_of(bench, task) *
                               (bench.depths.empty() ? 1 : static_cast<int>(bench.depths.size()));
          const int max_new = bench.max_new_tokens.value_or(config.max_new_tokens.value_or(0));
          for (const PromptMode mode : config.prompt_modes) {
            for (const auto& policy : config.policies) {
              for (const auto& budget : policy.budgets) {
                Cell cell;
                cell.model = model.name;
                cell.model_path = model.path;
                cell.benchmark = bench.benchmark;
                cell.task = task;
                cell.length = length;
                cell.policy = policy.name;
                cell.params = policy.params;
                cell.budget = budget;
                cell.prompt_mode = mode;
                cell.dense_layers = config.dense_layers;
                cell.max_new_tokens = max_new;
                group.cells.push_back(std::move(cell));
              }
            }
          }
          groups.push_back(std::move(group));
        }
      }
    }
  }
  return groups;
}

SweepPlan plan_sweep(const SweepConfig& config, const Shard& shard) {
  SweepPlan plan;
  plan.groups = expand_groups(config);
  int unit_index = 0;
  for (int g = 0; g < static_cast<int>(plan.groups.size()); ++g) {
    for (int s = 0; s < plan.groups[g].sample_count; ++s, ++unit_index) {
      if (shard.owns(unit_index)) plan.units.push_back(WorkUnit{g, s});
    }
  }
  return plan;
}

}  // namespace kvb
