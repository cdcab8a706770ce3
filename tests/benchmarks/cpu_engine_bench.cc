// CPU engine kernels: achieved rates beside a ceiling measured in the same run.
//   matvec (decode projections)       -> GB/s of weights read, vs. a plain parallel read of the
//                                        same bytes (BM_ReadBandwidth)
//   matmul (prefill projections)      -> GFLOP/s (OpenBLAS sgemm)
//   causal attention (prefill)        -> GFLOP/s, vs. the sgemm rate above
//   decode attention (one step)       -> GB/s of K/V read, with the cache in f32, f16 or bf16
//                                        (second argument: the ggml type code 0, 1 or 30)
// Shapes are SmolLM2-135M's (d_model 576, 9 query / 3 KV heads of 64, FFN 1536).
// Run: build/tests/benchmarks/cpu_engine_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/cpu/blas.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_rows.h"
#include "kernels/cpu/matmul.h"

namespace {

std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) * state.range(1);
  const auto buffer = random_vector(n, 1);
  for (auto _ : state) {
    const double sum = kvb::parallel_read_sum(buffer.data(), n, 1 << 14);
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
}
BENCHMARK(BM_ReadBandwidth)->Args({49152, 576})->Args({1536, 576})->UseRealTime();

void BM_Matvec(benchmark::State& state) {
  const int out = state.range(0), in = state.range(1);
  const auto w = random_vector(size_t(out) * in, 2), x = random_vector(in, 3);
  std::vector<float> y(out);
  for (auto _ : state) {
    kvb::kernels::matvec(w.data(), out, in, x.data(), nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(out) * in * sizeof(float));
}
BENCHMARK(BM_Matvec)->Args({49152, 576})->Args({1536, 576})->UseRealTime();

void BM_Matmul(benchmark::State& state) {
  const int rows = state.range(0), in = 576, out = 1536;
  const auto x = random_vector(size_t(rows) * in, 4), w = random_vector(size_t(out) * in, 5);
  std::vector<float> y(size_t(rows) * out);
  for (auto _ : state) {
    kvb::kernels::matmul(x.data(), rows, in, w.data(), out, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * rows * in * out * state.iterations(), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Matmul)->Arg(512)->Arg(2048)->UseRealTime();

void BM_CausalAttention(benchmark::State& state) {
  const int T = state.range(0), Hq = 9, Hkv = 3, d = 64;
  const auto q = random_vector(size_t(T) * Hq * d, 6);
  std::vector<std::vector<float>> k, v;
  kvb::kernels::PrefillAttentionArgs args;
  args.n_query_heads = Hq;
  args.n_kv_heads = Hkv;
  args.head_dim = d;
  args.n_queries = T;
  args.queries = q.data();
  for (int h = 0; h < Hkv; ++h) {
    k.push_back(random_vector(size_t(T) * d, 7 + h));
    v.push_back(random_vector(size_t(T) * d, 17 + h));
  }
  for (int h = 0; h < Hkv; ++h) {
    args.keys.push_back(k[h].data());
    args.values.push_back(v[h].data());
    args.prefix.push_back(0);
  }
  std::vector<float> out(size_t(T) * Hq * d);
  args.output = out.data();
  for (auto _ : state) {
    kvb::kernels::prefill_attention(args);
    benchmark::DoNotOptimize(out.data());
  }
  // Useful work: QK^T and PV over the causal half.
  const double flops = 2.0 * 2.0 * Hq * d * (double(T) * (T + 1) / 2);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_CausalAttention)->Arg(512)->Arg(2048)->UseRealTime();

void BM_DecodeAttention(benchmark::State& state) {
  const int n = state.range(0), d = 64;
  const auto type = static_cast<uint32_t>(state.range(1));
  const int element = kvb::kernels::kv_element_bytes(type);
  const auto q = random_vector(d, 8), k = random_vector(size_t(n) * d, 9),
             v = random_vector(size_t(n) * d, 10);
  std::vector<uint8_t> keys(k.size() * element), values(v.size() * element);
  kvb::kernels::encode_kv_rows(type, k.data(), keys.data(), static_cast<int64_t>(k.size()));
  kvb::kernels::encode_kv_rows(type, v.data(), values.data(), static_cast<int64_t>(v.size()));
  std::vector<float> out(d);
  kvb::kernels::DecodeAttentionArgs args{.query = q.data(),
                                         .keys = keys.data(),
                                         .values = values.data(),
                                         .kv_type = type,
                                         .n_entries = n,
                                         .head_dim = d,
                                         .output = out.data()};
  for (auto _ : state) benchmark::DoNotOptimize(kvb::kernels::decode_attention(args));
  state.SetBytesProcessed(state.iterations() * int64_t(n) * d * 2 * element);
}
BENCHMARK(BM_DecodeAttention)->ArgsProduct({{2048, 8192}, {0, 1, 30}})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
