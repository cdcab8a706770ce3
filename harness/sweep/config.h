// A sweep config (JSON): which models, benchmarks, policies, budgets and prompt modes to run.
// It is validated completely before anything runs; every error names the offending key path
// (e.g. "benchmarks[1].lengths[0]") and says what is expected there.
//
//   {
//     "name": "demo",
//     "models": [{"name": "smollm2-135m", "path": "models/SmolLM2-135M-Instruct.Q4_1.gguf"}],
//     "benchmarks": [{"benchmark": "ruler", "tasks": ["niah_single_1"], "lengths": [1024],
//                     "samples": 4, "seed": 42},
//                    {"benchmark": "niah", "lengths": [1024, 2048], "depths": [0, 50, 100]},
//                    {"benchmark": "longbench", "data_dir": "data/longbench", "samples": 20},
//                    {"benchmark": "infinitebench", "tasks": ["passkey", "longbook_choice_eng"],
//                     "lengths": [4096], "data_dir": "data/infinitebench"}],
//     "policies": [{"name": "full"}, {"name": "snapkv", "params": {"window": 32}}],
//     "budgets": ["25%", "128"],
//     "prompt_mode": "query-aware",          // query-aware | question-agnostic | both
//     "dense_layers": [],                    // layers left uncompressed (policies that have them)
//     "max_new_tokens": 32,                  // optional cap over each task's own limit
//     "data_dir": "my-data",                 // optional; searched first for essays, word lists
//                                            // (then data/, filled by setup.sh)
//     "device": "auto",                      // cpu | cuda | auto (GPU when present); --device
//     "kv_dtype": "f16",                     // optional: the CPU engine's KV cache, f32 | f16 |
//                                            // bf16 (--kv-dtype overrides; the GPU's is bf16)
//     "numerics": "bf16-device",             // optional: the CPU engine's forward, f32 |
//                                            // bf16-device (the GPU's roundings; --numerics)
//     "latency_samples": 3                   // per group, samples timed with each cell alone
//   }
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "datasets/registry.h"  // BenchmarkSpec
#include "engine/cache_policy.h"
#include "engine/cpu/device_numerics.h"

namespace kvb {

enum class PromptMode { kQueryAware, kQuestionAgnostic };
std::string to_string(PromptMode mode);                 // "query-aware" | "question-agnostic"
PromptMode parse_prompt_mode(const std::string& text);  // throws InputError

struct ModelSpec {
  std::string name;  // label in tables (defaults to the file name without extension)
  std::string path;  // resolved (see SweepConfig::resolve_path)
};

struct PolicySpec {
  std::string name;  // registry name, e.g. "snapkv", "snapkv+art"
  nlohmann::json params = nlohmann::json::object();
  // Parsed once here; {std::nullopt} for budget-less policies.
  std::vector<std::optional<Budget>> budgets;
};

struct SweepConfig {
  std::string name;
  std::vector<ModelSpec> models;
  std::vector<BenchmarkSpec> benchmarks;
  std::vector<PolicySpec> policies;
  std::vector<PromptMode> prompt_modes;
  std::vector<int> dense_layers;
  std::optional<int> max_new_tokens;
  std::string data_dir;             // empty: the datasets layer's default search
  std::string device = "auto";      // cpu | cuda | auto (the GPU when one is present)
  std::optional<KvDtype> kv_dtype;  // the CPU engine's cache element type (nullopt: its default)
  std::optional<ForwardPrecision> numerics;  // the CPU engine's forward (nullopt: f32)
  // The first N samples of each group run every cell alone at batch 1, so that their TTFT and
  // TPOT are a request's latency; the rest decode a sample's cells together (accuracy rows).
  int latency_samples = 3;
  nlohmann::json source;  // the config as written (stored with every run)
};

// Parses and validates. `config_path` is used in messages and to resolve relative paths.
SweepConfig parse_sweep_config(const nlohmann::json& json,
                               const std::filesystem::path& config_path);
// Reads the file (InputError when missing, FormatError when not JSON) and parses it.
SweepConfig load_sweep_config(const std::filesystem::path& config_path);

// Relative paths in a config are tried against the current directory first, then against the
// config's folder and each folder above it, so "models/x.gguf" in configs/demo.json works from the
// repository root and from anywhere below it. Returns the first existing candidate, else `path`.
std::string resolve_config_path(const std::string& path, const std::filesystem::path& config_path);

// Policies that take no budget (Full KV and Full KV + ART; policy_takes_budget in
// policies/registry.h): one cell per prompt mode, budget "".
bool policy_is_budgetless(const std::string& name);

// Checks every policy name against `known` (the registry), naming the key of an unknown one.
void check_policy_names(const SweepConfig& config, const std::vector<std::string>& known);

}  // namespace kvb
