// Matrix products on stored weights (kernels/cpu/quantized_matmul.h) beside their f32 baselines in
// the same run, on SmolLM2-135M's shapes (d_model 576, FFN 1536, vocabulary 49,152):
//   BM_StoredMatvec/type/out/in      decode: GB/s of stored weight bytes (all threads)
//   BM_RowDots/type/path             one thread, scalar vs AVX2 row dots on a 1536 x 576 matrix
//   BM_StoredMatmul/type/rows        prefill: GFLOP/s on dequantised tiles; type 0 is f32 sgemm
// Run: build/tests/benchmarks/quantized_matmul_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantized_matmul.h"

namespace {

using namespace kvb::kernels;

// A [rows, cols] matrix of random f32 values encoded in `type` (via random blocks with sane
// scales: each block's fp16 fields are overwritten with small values).
std::vector<uint8_t> random_stored(uint32_t type, int64_t rows, int64_t cols) {
  int64_t block_elements = 1, block_bytes = 4;
  kvb::dequantize_block_geometry(type, &block_elements, &block_bytes);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / block_elements * block_bytes));
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const int half_field = type == 14 ? 208 : 0;  // q6_K keeps its scale last
  for (size_t b = 0; b + block_bytes <= bytes.size() && type != 0; b += block_bytes) {
    const uint16_t h = kvb::f32_to_fp16(0.01f);
    bytes[b + half_field] = static_cast<uint8_t>(h & 0xFF);
    bytes[b + half_field + 1] = static_cast<uint8_t>(h >> 8);
  }
  if (type == 0)
    for (size_t i = 0; i < bytes.size(); i += 4) bytes[i + 3] = 0x3C;  // finite floats
  return bytes;
}

std::vector<float> random_floats(int64_t n) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

void BM_StoredMatvec(benchmark::State& state) {
  const auto type = static_cast<uint32_t>(state.range(0));
  const int64_t out = state.range(1), in = state.range(2);
  const auto bytes = random_stored(type, out, in);
  const auto x = random_floats(in);
  std::vector<float> y(static_cast<size_t>(out));
  const WeightView w{type, bytes.data(), out, in};
  for (auto _ : state) {
    matvec(w, x.data(), nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
}
// q4_1 and q8_0 (SmolLM2), q4_K, q5_0, q6_K (Qwen2.5-Coder) and f32 (the reference mode).
BENCHMARK(BM_StoredMatvec)
    ->Args({3, 1536, 576})
    ->Args({3, 576, 1536})
    ->Args({8, 49152, 576})
    ->Args({12, 1536, 1024})
    ->Args({6, 1536, 1024})
    ->Args({14, 1536, 1024})
    ->Args({0, 1536, 576})
    ->UseRealTime();

void BM_RowDots(benchmark::State& state) {
  const auto type = static_cast<uint32_t>(state.range(0));
  const DotPath path = state.range(1) == 1 ? DotPath::kAvx2 : DotPath::kScalar;
  if (!dot_path_available(path)) {
    state.SkipWithError("this CPU has no AVX2");
    return;
  }
  const int64_t rows = 1536, cols = 1024;
  const auto bytes = random_stored(type, rows, cols);
  const auto x = random_floats(cols);
  QuantizedActivations q;
  quantize_activations(x.data(), cols, activation_block_for(type), q);
  const WeightView w{type, bytes.data(), rows, cols};
  for (auto _ : state) {
    float sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += stored_row_dot(w, r, q, path);
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
}
BENCHMARK(BM_RowDots)->ArgsProduct({{2, 3, 6, 8, 12, 14}, {0, 1}});

void BM_StoredMatmul(benchmark::State& state) {
  const auto type = static_cast<uint32_t>(state.range(0));
  const int64_t n = state.range(1), out = 1536, in = 576;
  const auto bytes = random_stored(type, out, in);
  const auto x = random_floats(n * in);
  std::vector<float> y(static_cast<size_t>(n * out));
  const WeightView w{type, bytes.data(), out, in};
  for (auto _ : state) {
    matmul(x.data(), n, w, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * out * in * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StoredMatmul)->ArgsProduct({{0, 3, 8}, {512, 2048}})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
