// The real SweepBackend: loads each model once onto the sweep's device (engine/engine_factory.h),
// generates or loads each group's samples through the benchmark registry (datasets/registry.h),
// builds the prompt for the cell's prompt mode (chat template unless the dataset skips it), runs a
// sample's cells together under their CachePlans (engine/batch_generation.h: one prefill, one
// batched decode) and has the registry cut and score each answer.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "datasets/data_paths.h"
#include "datasets/sample.h"
#include "engine/engine_factory.h"
#include "engine/generation.h"
#include "engine/model.h"
#include "harness/sweep/config.h"
#include "harness/sweep/runner.h"
#include "policies/registry.h"

namespace kvb {

struct EngineBackendOptions {
  std::string device = "auto";  // cpu | cuda | auto
  bool batch_cells = true;      // false: each cell decoded on its own at batch 1
  int latency_samples = 3;      // samples (per group) whose cells all run alone, for latency
  WeightFormat weight_format = WeightFormat::kAsStored;  // how the CPU engine holds the weights
  CpuEngineOptions cpu;  // the CPU engine's cache element type and numerics
};

class EngineBackend : public SweepBackend {
 public:
  // `data` finds the essays and word lists (the config's data_dir first: datasets/data_paths.h).
  EngineBackend(const SweepConfig& config, DataSearch data, FILE* log,
                EngineBackendOptions options = {});
  ~EngineBackend() override;

  void begin_group(const SampleGroup& group) override;
  bool replays_prefill(const Cell& cell) const override;
  std::vector<SampleResult> run_cells(const SampleGroup& group,
                                      const std::vector<const Cell*>& cells, int sample_index,
                                      PromptMode mode) override;

  // Loads (or returns the loaded) model at `path` onto the device: its SHA-256 is recorded with
  // the run.
  const LoadedModel& model(const std::string& path);
  // "cpu" or "cuda": where the models run (resolved from the options at construction).
  const std::string& device() const { return device_; }
  // Builds every cell's plan once, before any row is written: an InputError names the policy,
  // params and budget the registry refuses. The plans are kept for check_device() and
  // replays_prefill(); each run builds its own (a plan holds its run's selector state).
  void check_cells(const std::vector<SampleGroup>& groups);
  // Checks that the device runs every cell's plan (InputError naming the policy otherwise);
  // loads the groups' models. After check_cells().
  void check_device(const std::vector<SampleGroup>& groups);

 private:
  struct ModelState;
  struct Prompt {
    std::vector<TokenId> context;   // prefilled (and compressed)
    std::vector<TokenId> question;  // appended after compression (question-agnostic), or empty
  };
  Prompt build_prompt(const Sample& sample, PromptMode mode) const;
  GenerationOptions options_for(const Sample& sample, const Cell& cell) const;
  const Sample& sample_at(int sample_index) const;
  SampleResult to_result(const Sample& sample, const Cell& cell,
                         const GenerationResult& generated) const;

  DataSearch data_;
  FILE* log_;
  EngineBackendOptions options_;
  std::string device_;
  std::map<std::string, std::unique_ptr<ModelState>> models_;
  ModelState* current_ = nullptr;
  std::vector<Sample> samples_;                     // of the current group
  std::map<std::string, CachePlan> checked_plans_;  // by cell key, built by check_cells()
  PlanFiles plan_files_;  // files the plans read (BinaryPC projections), once per sweep
};

}  // namespace kvb
