// Expansion of a sweep config into cells and work units, and deterministic sharding.
//
// A cell is one (model, benchmark, task, length, policy, params, budget, prompt mode) combination;
// its key is a canonical JSON string, so a cell found in two databases (shards, resumed runs) is
// recognised as the same one. A work unit is one sample of one (model, benchmark, task, length)
// group together with every cell of that group: the runner prefills the sample once per prompt
// mode and replays all replayable cells from that snapshot, so a unit is never split across shards.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/cache_policy.h"
#include "harness/sweep/config.h"
#include "policies/registry.h"

namespace kvb {

struct Cell {
  std::string model;  // model label
  std::string model_path;
  std::string benchmark;
  std::string task;
  int length = 0;
  std::string policy;  // registry name, e.g. "snapkv+art"
  nlohmann::json params = nlohmann::json::object();
  std::optional<Budget> budget;  // parsed once, by the config; absent for budget-less policies
  PromptMode prompt_mode = PromptMode::kQueryAware;
  std::vector<int> dense_layers;
  int max_new_tokens = 0;  // 0: the task's own limit

  // The budget as the config and the database write it ("25%", "512"), "" when absent.
  std::string budget_text() const;
  // What the cell's cache plan is built from: its policy, params and budget, with the sweep's
  // dense layers filled in where the method has that parameter and the config did not set it.
  PlanSpec plan_spec() const;

  // Canonical identity: the same cell always gives the same key.
  std::string key() const;
  nlohmann::json to_json() const;
  // "snapkv(window=32)" style label: the name plus the params that were set.
  std::string policy_label() const;
};
Cell cell_from_json(const nlohmann::json& json);
// The inverse of Cell::budget_text(): "" is no budget, anything else goes through Budget::parse.
std::optional<Budget> budget_from_text(const std::string& text);

// Samples of one (model, benchmark, task, length) group share their generated inputs.
struct SampleGroup {
  std::string model;
  std::string model_path;
  BenchmarkSpec benchmark;  // the spec this group came from
  std::string task;
  int length = 0;
  int sample_count = 0;     // niah: depths x samples; loaded tasks: records (capped by samples)
  std::vector<Cell> cells;  // every cell of the group, in config order
};

struct WorkUnit {
  int group = 0;         // index into the groups vector
  int sample_index = 0;  // 0 .. sample_count-1
};

struct Shard {
  int index = 0;  // 0-based
  int count = 1;
  // "i/N" with 0 <= i < N. Throws InputError naming the flag.
  static Shard parse(const std::string& text);
  bool owns(int unit_index) const { return unit_index % count == index; }
  std::string to_string() const { return std::to_string(index) + "/" + std::to_string(count); }
};

struct SweepPlan {
  std::vector<SampleGroup> groups;
  std::vector<WorkUnit> units;  // only this shard's units, in deterministic order
  int64_t total_rows() const;   // sum over units of the group's cell count
};

// Groups of loaded benchmarks (LongBench, InfiniteBench's loaded tasks) count the records of their
// data files here: a missing folder or file is an InputError naming the config key.
std::vector<SampleGroup> expand_groups(const SweepConfig& config);
// All units of all groups (sample-major inside a group), keeping those the shard owns.
SweepPlan plan_sweep(const SweepConfig& config, const Shard& shard);

}  // namespace kvb
