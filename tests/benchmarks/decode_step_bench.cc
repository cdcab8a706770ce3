// Decode-step time of the decode-time methods against Full KV on the CPU engine, at 4K and 8K
// cached tokens (SmolLM2-135M shapes: 30 layers, 9 query / 3 KV heads, d = 64; seeded random
// weights, since the step's cost does not depend on the weight values).
//
// The cache is filled with random post-RoPE keys and values instead of a real prefill (a prefill of
// 8K tokens costs minutes on a small CPU). Selection costs do not depend on the values, except
// where the method is data-dependent: MagicPIG's candidate count and ART's stopping point. On
// random keys attention is nearly flat, so ART never stops and "full+art" measures the walk's
// overhead (the paper's p = inf case); its skipping on real caches is measured by the NIAH run.
//
// Build and run:  cmake --build build --target decode_step_bench &&
// build/tests/benchmarks/decode_step_bench Each row reports ms per decode step (wall "Time" and
// "CPU" = CPU time of the whole process, all threads) and ratio_to_full / cpu_ratio_to_full against
// Full at the same length in the same run. On a shared, loaded machine the wall times swing with
// the other load; the CPU ratios are steadier.
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <string>

#include "engine/cpu/forward.h"
#include "engine/presets.h"
#include "policies/registry.h"

namespace kvb {
namespace {

ModelConfig smollm2_shapes() {
  ModelConfig config;
  config.name = "SmolLM2-135M shapes (random weights)";
  config.n_layers = 30;
  config.d_model = 576;
  config.n_query_heads = 9;
  config.n_kv_heads = 3;
  config.head_dim = 64;
  config.ffn_dim = 1536;
  config.vocab_size = 49152;
  config.max_context = 16384;
  config.rope_theta = 100000.0f;
  config.tied_embeddings = true;
  return config;
}

const ModelWeights& weights() {
  static const std::shared_ptr<ModelWeights> shared = random_weights(smollm2_shapes(), 7);
  return *shared;
}

KvStore random_cache(const ModelConfig& config, int length) {
  KvStore store(config.n_layers, config.n_kv_heads, config.head_dim);
  store.reserve(length + 4096);
  std::mt19937 generator(11);
  std::normal_distribution<float> gaussian(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(config.n_kv_heads) * config.head_dim), v(k.size());
  for (int layer = 0; layer < config.n_layers; ++layer)
    for (int t = 0; t < length; ++t) {
      for (float& x : k) x = gaussian(generator);
      for (float& x : v) x = gaussian(generator);
      store.append(layer, t, k.data(), v.data());
    }
  return store;
}

// Full's real and process-CPU time per step, by cache length.
std::map<int, std::pair<double, double>>& full_ms() {
  static std::map<int, std::pair<double, double>> by_length;
  return by_length;
}

void decode_step(benchmark::State& state, const std::string& policy) {
  const int length = static_cast<int>(state.range(0));
  CpuEngine engine(weights());
  KvStore store = random_cache(engine.config(), length);
  CachePlan plan = make_cache_plan(policy, nlohmann::json::object(), Budget::parse("10%"));
  const int budget = plan.budget->tokens_for(length);
  if (plan.selector) plan.selector->start(store, length, budget);
  int position = length;
  int step = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(engine.decode_step(42, position, step, store, plan));
    ++position;
    ++step;
  }
  state.SetLabel(policy + " @" + std::to_string(length));
  if (plan.early_exit && plan.early_exit_stats.blocks_total > 0)
    state.counters["skipped_blocks"] = plan.early_exit_stats.skipped_fraction();
}

// Registers every method at both lengths, Full first so that the ratios can refer to it.
void register_all() {
  const std::vector<std::string> policies = {"full",     "topk",     "quest",
                                             "magicpig", "binarypc", "full+art"};
  for (const std::string& policy : policies)
    benchmark::RegisterBenchmark(("decode_step/" + policy).c_str(),
                                 [policy](benchmark::State& state) { decode_step(state, policy); })
        ->Arg(4096)
        ->Arg(8192)
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime()
        ->MinTime(2.0);
}

// Adds ratio_to_full to every row of the same length once all runs are known.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> annotated = runs;
    for (Run& run : annotated) {
      const int length = std::stoi(run.run_name.args);
      const std::pair<double, double> per_step = {run.GetAdjustedRealTime(),
                                                  run.GetAdjustedCPUTime()};
      if (run.run_name.function_name == "decode_step/full") full_ms()[length] = per_step;
      const auto full = full_ms().find(length);
      if (full != full_ms().end() && full->second.first > 0 && full->second.second > 0) {
        run.counters["ratio_to_full"] = per_step.first / full->second.first;
        run.counters["cpu_ratio_to_full"] = per_step.second / full->second.second;
      }
    }
    ConsoleReporter::ReportRuns(annotated);
  }
};

}  // namespace
}  // namespace kvb

int main(int argc, char** argv) {
  kvb::register_all();
  benchmark::Initialize(&argc, argv);
  kvb::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
