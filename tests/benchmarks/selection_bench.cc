// Host selection primitives at a 32K prompt's sizes: what every cell of a sweep runs on the host
// (on the GPU backend too: only O(L) scores per head cross to the host; the selection is here).
// top_k (ranked) and top_k_set (the set in index order) against the heap-based partial_sort over
// indices they replaced, and pool1d (kernel 7) against the window-by-window loop it replaced; each
// baseline measured in the same run, on the same scores.
// Counters: ms (per call), baseline_ms, speedup = baseline_ms / ms.
//
//   build/tests/benchmarks/selection_bench [benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "policies/selection.h"

namespace {

// Scores as a scorer hands them over: normal, with ties (quantised to 1/64).
std::vector<float> scores_of(int n) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  std::vector<float> scores(n);
  for (float& s : scores) s = std::round(normal(rng) * 64) / 64;
  return scores;
}

// The baselines, as the functions were before 2026-12-06.
std::vector<int32_t> partial_sort_top_k(const std::vector<float>& scores, int k) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    const float sa = std::isnan(scores[a]) ? -INFINITY : scores[a];
    const float sb = std::isnan(scores[b]) ? -INFINITY : scores[b];
    return sa != sb ? sa > sb : a < b;
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
  order.resize(k);
  return order;
}

std::vector<float> window_by_window_pool(const std::vector<float>& scores, int kernel, bool max) {
  const int n = static_cast<int>(scores.size()), half = kernel / 2;
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) {
    const int lo = std::max(0, i - half), hi = std::min(n - 1, i + half);
    float value = max ? -INFINITY : 0.f;
    for (int j = lo; j <= hi; ++j) value = max ? std::max(value, scores[j]) : value + scores[j];
    out[i] = max ? value : kvb::round_to_bf16(value / kernel);
  }
  return out;
}

double ms_per_call(const std::function<void()>& call, int reps = 20) {
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) call();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         reps;
}

void report(benchmark::State& state, const std::function<void()>& call,
            const std::function<void()>& baseline) {
  const double base_ms = ms_per_call(baseline);
  for (auto _ : state) call();
  const double ms = ms_per_call(call);
  state.counters["ms"] = ms;
  state.counters["baseline_ms"] = base_ms;
  state.counters["speedup"] = base_ms / ms;
}

// Args: candidates, percent kept, 0 the ranked top_k / 1 top_k_set (the set in index order).
void BM_TopK(benchmark::State& state) {
  const auto scores = scores_of(static_cast<int>(state.range(0)));
  const int k = static_cast<int>(state.range(0) * state.range(1) / 100);
  const bool set = state.range(2) == 1;
  report(
      state,
      [&] { benchmark::DoNotOptimize(set ? kvb::top_k_set(scores, k) : kvb::top_k(scores, k)); },
      [&] { benchmark::DoNotOptimize(partial_sort_top_k(scores, k)); });
}
BENCHMARK(BM_TopK)
    ->ArgsProduct({{32768, 65536}, {5, 30}, {0, 1}})
    ->ArgNames({"n", "percent", "set"})
    ->Unit(benchmark::kMillisecond);

// Arg: 1 max pooling, 0 avg pooling with the reference's bf16 casts; 32,768 scores, kernel 7.
void BM_Pool1d(benchmark::State& state) {
  const auto scores = scores_of(32768);
  const bool max = state.range(0) == 1;
  const kvb::Pooling pooling = max ? kvb::Pooling::kMax : kvb::Pooling::kAvg;
  report(
      state,
      [&] { benchmark::DoNotOptimize(kvb::pool1d(scores, 7, pooling, kvb::Precision::kBf16)); },
      [&] { benchmark::DoNotOptimize(window_by_window_pool(scores, 7, max)); });
}
BENCHMARK(BM_Pool1d)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
