// Compression cost as a fraction of prefill: SnapKV, DropKV and CAKE scoring + selection on the
// CPU at 4K tokens, against the CPU engine's full-attention prefill of the same prompt, measured in
// the same run. Model: SmolLM2-135M (models/, or $KVB_MODEL) when present, else the tiny-llama
// preset at 2K tokens (its context limit). Prints one line per policy:
//   <policy>: compress <ms> ms = <ratio> x prefill (<ms> ms, <L> tokens)
// and reports the same as Google Benchmark counters (compress_over_prefill).
//
//   build/tests/benchmarks/policy_scoring_bench [--tokens N] [benchmark flags]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "engine/cpu/forward.h"
#include "engine/generation.h"
#include "engine/model.h"
#include "engine/prefill_capture.h"
#include "policies/registry.h"

namespace {

struct Setup {
  kvb::LoadedModel model;
  std::unique_ptr<kvb::CpuEngine> engine;
  kvb::PrefillSnapshot snapshot;
  double prefill_ms = 0;
};

Setup& setup(int tokens) {
  static Setup s = [&] {
    Setup out;
    std::string path = KVB_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (const char* env = std::getenv("KVB_MODEL")) path = env;
    if (!std::filesystem::exists(path)) {
      path = "preset:tiny-llama";
      tokens = std::min(tokens, 2048);
    }
    out.model = kvb::load_model(path);
    out.engine = std::make_unique<kvb::CpuEngine>(*out.model.weights);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> token(100, out.model.weights->config.vocab_size - 1);
    std::vector<kvb::TokenId> ids(tokens);
    for (auto& id : ids) id = token(rng);
    kvb::CaptureRequest request;
    for (const char* policy : {"snapkv", "dropkv", "cake"})
      request.merge(kvb::make_cache_plan(policy, {}, kvb::Budget::parse("10%")).prefill->capture());
    kvb::Generator generator(*out.engine, out.model.tokenizer.get());
    out.snapshot = generator.prefill(ids, request);
    out.prefill_ms = out.snapshot.prefill_ms;
    std::printf("model %s, prefill of %d tokens: %.1f ms\n", path.c_str(), tokens, out.prefill_ms);
    return out;
  }();
  return s;
}

void compress(benchmark::State& state, const std::string& policy, int tokens) {
  Setup& s = setup(tokens);
  const kvb::CachePlan plan = kvb::make_cache_plan(policy, {}, kvb::Budget::parse("10%"));
  const int budget = kvb::Budget::parse("10%").tokens_for(s.snapshot.length);
  double total_ms = 0;
  int64_t runs = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const kvb::PrefillView view = kvb::make_prefill_view(*s.model.weights, &s.snapshot.store,
                                                         s.snapshot.capture, s.snapshot.request);
    benchmark::DoNotOptimize(plan.prefill->select(view, budget));
    total_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ++runs;
  }
  const double ms = total_ms / std::max<int64_t>(runs, 1);
  state.counters["compress_ms"] = ms;
  state.counters["prefill_ms"] = s.prefill_ms;
  state.counters["compress_over_prefill"] = ms / s.prefill_ms;
  std::printf("%s: compress %.1f ms = %.4f x prefill (%.1f ms, %d tokens)\n", policy.c_str(), ms,
              ms / s.prefill_ms, s.prefill_ms, s.snapshot.length);
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 4096;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--tokens") tokens = std::atoi(argv[i + 1]);
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--tokens") {
      ++i;
      continue;
    }
    rest.push_back(argv[i]);
  }
  int rest_count = static_cast<int>(rest.size());
  for (const char* policy : {"snapkv", "dropkv", "cake"})
    benchmark::RegisterBenchmark(
        (std::string("compress/") + policy).c_str(),
        [policy, tokens](benchmark::State& state) { compress(state, policy, tokens); })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(2);
  benchmark::Initialize(&rest_count, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
