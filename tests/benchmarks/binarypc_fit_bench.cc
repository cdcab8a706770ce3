// Online BinaryPC preparation on the host for a Qwen2.5-Coder-0.5B-shaped prompt cache (24 layers,
// layers 0-1 dense, so 22 fitted layers x 2 KV heads, d = 64), with deterministic N(0, 1) keys:
//   fit_one_head/L           fit_binary_projection of one (layer, KV head): the unit of work
//   fit_binary_projections/L the per-head fit as `kvbench calibrate` runs it (TBB over heads)
//   host_store/L, host_keys/L  CudaBackend's host copy of the prompt from the device's per-layer
//                            downloads ([Hkv, capacity, d]): keys and values, or the keys alone
//                            (Engine::host_keys; the GPU engine fits on the device instead)
// Each prints its wall time, and the fits their ratio to 44 x fit_one_head / cores (the time if
// the heads were spread perfectly over the cores of this machine).
//
//   build/tests/benchmarks/binarypc_fit_bench [benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "engine/kv_store.h"
#include "kernels/cpu/matmul.h"
#include "policies/binarypc_projection.h"

namespace {

constexpr int kLayers = 24, kDenseLayers = 2, kKvHeads = 2, kHeadDim = 64;
constexpr int kFittedHeads = (kLayers - kDenseLayers) * kKvHeads;

// Keys of (layer, head) as [length, d], the same for every benchmark.
std::vector<float> random_keys(int length, int layer, int head) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * layer + head));
  std::normal_distribution<float> gaussian(0.0f, 1.0f);
  std::vector<float> keys(static_cast<size_t>(length) * kHeadDim);
  for (float& x : keys) x = gaussian(rng);
  return keys;
}

// The device's per-layer download as CudaEngine::cached_sequence returns it: [Hkv, capacity, d].
std::vector<float> layer_download(int length, int capacity, int layer) {
  std::vector<float> rows(static_cast<size_t>(kKvHeads) * capacity * kHeadDim, 0.0f);
  for (int h = 0; h < kKvHeads; ++h) {
    const std::vector<float> keys = random_keys(length, layer, h);
    std::copy(keys.begin(), keys.end(),
              rows.begin() + static_cast<size_t>(h) * capacity * kHeadDim);
  }
  return rows;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double one_head_seconds(int length) {
  static std::map<int, double> measured;
  auto it = measured.find(length);
  if (it != measured.end()) return it->second;
  const std::vector<float> keys = random_keys(length, kDenseLayers, 0);
  std::vector<float> projection(64 * kHeadDim);
  const kvb::kernels::SingleThreadedBlas single_threaded;
  const auto start = std::chrono::steady_clock::now();
  kvb::fit_binary_projection(keys.data(), length, kHeadDim, kvb::BinaryProjectionFit{},
                             projection.data());
  return measured[length] = seconds_since(start);
}

void report(benchmark::State& state, const char* name, int length, double seconds, bool fit) {
  state.counters["s"] = seconds;
  if (!fit) {
    std::printf("%s/%d: %.3f s\n", name, length, seconds);
    return;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double ideal = kFittedHeads * one_head_seconds(length) / std::min<unsigned>(cores, 44);
  state.counters["over_ideal"] = seconds / ideal;
  std::printf("%s/%d: %.3f s = %.2f x ideal (%d heads x %.3f s / %u cores)\n", name, length,
              seconds, seconds / ideal, kFittedHeads, one_head_seconds(length), cores);
}

void fit_one_head(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  double seconds = 0;
  for (auto _ : state) seconds = one_head_seconds(length);
  report(state, "fit_one_head", length, seconds, false);
}

void fit_projections(benchmark::State& state) {
  const int length = static_cast<int>(state.range(0));
  double seconds = 0;
  for (auto _ : state) {
    std::vector<std::vector<float>> keys;
    for (int l = kDenseLayers; l < kLayers; ++l)
      for (int h = 0; h < kKvHeads; ++h) keys.push_back(random_keys(length, l, h));
    kvb::BinaryProjectionSet set(kLayers - kDenseLayers, kKvHeads, kHeadDim);
    const auto start = std::chrono::steady_clock::now();
    kvb::fit_binary_projections(keys, length, kvb::BinaryProjectionFit{}, set);
    seconds = seconds_since(start);
    benchmark::DoNotOptimize(set.rows.data());
  }
  report(state, "fit_binary_projections", length, seconds, true);
}

// CudaBackend's host copy on host vectors in place of the device's downloads: per layer, the keys
// (and values) [Hkv, capacity, d] as CudaEngine::cached_sequence returns them, appended to a host
// store head by head (KvStore::append_rows). `values` false: Engine::host_keys; true: host_store.
void host_copy(benchmark::State& state, bool values) {
  const int length = static_cast<int>(state.range(0));
  const int capacity = length + 64;  // the engine reserves room for the decode tokens
  std::vector<std::vector<float>> downloads;
  for (int l = 0; l < kLayers; ++l) downloads.push_back(layer_download(length, capacity, l));
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    kvb::KvStore store = values ? kvb::KvStore(kLayers, kKvHeads, kHeadDim)
                                : kvb::KvStore::keys_only(kLayers, kKvHeads, kHeadDim);
    store.set_reported_bytes_per_element(2);
    for (int l = 0; l < kLayers; ++l) {
      const std::vector<float> keys = downloads[l];  // cached_sequence(l, seq, false)
      const std::vector<float> value_rows = values ? downloads[l] : std::vector<float>();
      store.reserve(length);
      for (int h = 0; h < kKvHeads; ++h) {
        const size_t first = static_cast<size_t>(h) * capacity * kHeadDim;
        store.append_rows(l, h, 0, length, &keys[first], values ? &value_rows[first] : nullptr);
      }
    }
    seconds = seconds_since(start);
    benchmark::DoNotOptimize(store.keys(kLayers - 1, 0));
  }
  report(state, values ? "host_store" : "host_keys", length, seconds, false);
}

void host_store(benchmark::State& state) { host_copy(state, true); }
void host_keys(benchmark::State& state) { host_copy(state, false); }

}  // namespace

BENCHMARK(fit_one_head)->Arg(16384)->Arg(32768)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(host_store)->Arg(16384)->Arg(32768)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(host_keys)->Arg(16384)->Arg(32768)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(fit_projections)->Arg(16384)->Arg(32768)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
