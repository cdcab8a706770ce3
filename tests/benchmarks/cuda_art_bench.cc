// ART decode kernel (kernels/cuda/early_exit_decode.h) against the plain flash-decoding kernel
// (decode_attention) at Llama-3.1-8B shapes: Hq 32, Hkv 8, d 128, batch 1, one layer's cache.
// Run on the GPU machine: ./cuda_art_bench --benchmark_counters_tabular=true
//
// BM_ArtOverhead/n/decider/chunk/same_splits: termination disabled (the same walk and the
//   stability test after every block of the deciding split, never acted on) vs decode_attention
//   on random K/V; decider
//   and chunk are the walk layout's blocks (0/0 = automatic, what the engine runs; the explicit
//   rows compare other layouts); same_splits = 1 runs the plain kernel over the walk's split count.
//   Counters: plain_us, art_us, overhead_pct = art/plain - 1 (target < 2%; the ART paper reports
//   1.3%), window (the decider's blocks), chunk, splits, plain_splits (0 = automatic).
// BM_ArtTermination/n/decider: termination on (defaults tau 1e-5, phi 1e-3, patience 2, 4 sinks)
//   on a sink-and-recent-dominated profile; decider = the decision window in walk blocks (0 =
//   automatic), the other chunks automatic. Counters: plain_us (same inputs), art_us, speedup =
//   plain/art, skipped = 1 - visited/total blocks (what the output ignores), work_skipped =
//   1 - loaded/total (tiles never fetched), window, chunk, splits.
// Profile (synthetic, documented): per KV group a shared query direction c (q_a = c + 5% noise);
//   key j = uniform(-0.5, 0.5) noise + lambda_j c sqrt(d)/|c|^2, so its logit is about lambda_j:
//   16 for the 4 sink entries, 10 for the 48 most recent, ~0 (±0.2) for every other entry — the
//   attention-sink shape; V uniform(-1, 1).
// Timing: each measurement is `kRepeats` back-to-back launches between CUDA events; plain and ART
// alternate within every iteration, and the cache is replicated over enough copies (rotated per
// launch) that a launch does not find its K/V in L2 (50 MB on the H200) from the previous one.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/early_exit_decode.h"
#include "kernels/cuda/transformer_ops.h"

namespace kvb {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kHq = 32, kHkv = 8, kD = 128, kRepeats = 20;

uint16_t bf16_bits(float x) {
  const bf16 value = __float2bfloat16(x);
  uint16_t bits;
  std::memcpy(&bits, &value, 2);
  return bits;
}

struct Setup {
  int n = 0, copies = 1;
  cuda::DeviceBuffer q, k, v, out, workspace, offsets, lengths, state;
  std::vector<cuda::DecodeAttentionArgs> plain;
  std::vector<cuda::EarlyExitDecodeArgs> art;

  Setup(int length, bool realistic) : n(length) {
    const size_t copy_bytes = size_t(kHkv) * n * kD * 2 * 2;
    copies = std::max<int>(1, int((size_t(200) << 20) / copy_bytes) + 1);
    const size_t rows = size_t(copies) * kHkv * n;
    q = cuda::DeviceBuffer(size_t(kHq) * kD * 2);
    k = cuda::DeviceBuffer(rows * kD * 2);
    v = cuda::DeviceBuffer(rows * kD * 2);
    out = cuda::DeviceBuffer(size_t(kHq) * kD * 2);
    workspace = cuda::DeviceBuffer(
        std::max(cuda::decode_attention_workspace_floats(1, kHq, kD, n),
                 cuda::early_exit_decode_workspace_floats(1, kHq, kD, n)) * 4);
    cuda::fill_random_bf16(k.as<bf16>(), rows * kD, 2, realistic ? 0.5f : 1.f, nullptr);
    cuda::fill_random_bf16(v.as<bf16>(), rows * kD, 3, 1.f, nullptr);
    if (realistic) {
      shape_profile();
    } else {
      cuda::fill_random_bf16(q.as<bf16>(), size_t(kHq) * kD, 1, 1.f, nullptr);
    }
    std::vector<int64_t> offset(size_t(copies) * kHkv);
    for (size_t i = 0; i < offset.size(); ++i) offset[i] = int64_t(i) * n;
    offsets = cuda::DeviceBuffer(offset.size() * 8);
    offsets.upload(offset.data(), offset.size() * 8);
    std::vector<int32_t> length_of(kHkv, n);
    lengths = cuda::DeviceBuffer(length_of.size() * 4);
    lengths.upload(length_of.data(), length_of.size() * 4);
    state = cuda::DeviceBuffer(size_t(kHkv) * cuda::kStateWords * 4);
    cuda::check(cudaMemset(state.data(), 0, state.bytes()), "memset");
    for (int c = 0; c < copies; ++c) {
      cuda::DecodeAttentionArgs a;
      a.q = q.as<bf16>();
      a.q_seq_stride = kHq * kD;
      a.k = k.as<bf16>();
      a.v = v.as<bf16>();
      a.kv_offset = offsets.as<int64_t>() + c * kHkv;
      a.kv_length = lengths.as<int32_t>();
      a.max_kv_length = n;
      a.out = out.as<bf16>();
      a.out_seq_stride = kHq * kD;
      a.batch = 1;
      a.n_query_heads = kHq;
      a.n_kv_heads = kHkv;
      a.head_dim = kD;
      a.scale = 1.f / std::sqrt(float(kD));
      a.workspace = workspace.as<float>();
      plain.push_back(a);
      cuda::EarlyExitDecodeArgs e;
      e.attention = a;
      e.walker_state = state.as<int32_t>();
      art.push_back(e);
    }
    cuda::check(cudaDeviceSynchronize(), "setup");
  }

  // Queries along a shared direction per group; sink and recent keys of every copy along it.
  void shape_profile() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> unit(-1.f, 1.f);
    std::vector<uint16_t> q_bits(size_t(kHq) * kD);
    for (int h = 0; h < kHkv; ++h) {
      std::vector<float> c(kD);
      double norm2 = 0;
      for (auto& x : c) {
        x = unit(rng);
        norm2 += x * x;
      }
      for (int a = h * 4; a < h * 4 + 4; ++a)
        for (int i = 0; i < kD; ++i) q_bits[size_t(a) * kD + i] = bf16_bits(c[i] + 0.05f * unit(rng));
      auto key_row = [&](float lambda) {
        std::vector<uint16_t> row(kD);
        for (int i = 0; i < kD; ++i)
          row[i] = bf16_bits(0.5f * unit(rng) + lambda * c[i] * std::sqrt(float(kD)) / float(norm2));
        return row;
      };
      for (int copy = 0; copy < copies; ++copy) {
        const size_t first_row = (size_t(copy) * kHkv + h) * n;
        for (int j = 0; j < n; ++j) {
          const bool sink = j < 4, recent = j >= n - 48;
          if (!sink && !recent) continue;
          const auto row = key_row(sink ? 16.f : 10.f);
          k.upload(row.data(), kD * 2, (first_row + j) * kD * 2);
        }
      }
    }
    q.upload(q_bits.data(), q_bits.size() * 2);
  }
};

float elapsed_ms(cudaEvent_t start, cudaEvent_t stop) {
  float ms = 0;
  cudaEventSynchronize(stop);
  cudaEventElapsedTime(&ms, start, stop);
  return ms;
}

template <typename Launch>
double time_us(Setup& setup, Launch launch) {
  static cudaEvent_t start = nullptr, stop = nullptr;
  if (!start) {
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
  }
  cudaEventRecord(start);
  for (int r = 0; r < kRepeats; ++r) launch(r % setup.copies);
  cudaEventRecord(stop);
  return elapsed_ms(start, stop) * 1e3 / kRepeats;
}

void set_layout_counters(benchmark::State& state, const cuda::EarlyExitDecodeArgs& args) {
  state.counters["window"] = cuda::early_exit_decider_blocks(args);
  state.counters["chunk"] = cuda::early_exit_chunk_blocks(args);
  state.counters["splits"] = cuda::early_exit_splits(args);
}

// Args: n, decider_blocks, chunk_blocks (0 = automatic, the layout the engine uses).
void BM_ArtOverhead(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  Setup setup(static_cast<int>(state.range(0)), false);
  for (auto& e : setup.art) {
    e.options.enabled = false;
    e.decider_blocks = static_cast<int>(state.range(1));
    e.chunk_blocks = static_cast<int>(state.range(2));
  }
  const int art_splits = cuda::early_exit_splits(setup.art[0]);
  if (state.range(3) != 0)  // the plain kernel over as many splits as the walk
    for (auto& a : setup.plain) a.chunk_size = (setup.n + art_splits - 1) / art_splits;
  state.counters["plain_splits"] =
      setup.plain[0].chunk_size > 0
          ? (setup.n + setup.plain[0].chunk_size - 1) / setup.plain[0].chunk_size
          : 0;
  auto plain = [&](int c) { cuda::decode_attention(setup.plain[c], nullptr); };
  auto art = [&](int c) { cuda::early_exit_decode(setup.art[c], nullptr); };
  time_us(setup, plain);  // warm-up (and kernel attributes)
  time_us(setup, art);
  double plain_total = 0, art_total = 0;
  int iterations = 0;
  for (auto _ : state) {
    const double p = time_us(setup, plain);
    const double a = time_us(setup, art);
    plain_total += p;
    art_total += a;
    ++iterations;
    state.SetIterationTime(a / 1e6);
  }
  state.counters["plain_us"] = plain_total / iterations;
  state.counters["art_us"] = art_total / iterations;
  state.counters["overhead_pct"] = (art_total / plain_total - 1.0) * 100.0;
  set_layout_counters(state, setup.art[0]);
}
// The automatic layout first; then the same against the plain kernel run over as many splits as the
// walk (33 at batch 1): at n = 32K exactly, 32 chunks of 1,024 keys serve the plain kernel, while
// the walk's separate sink block makes 513 walk blocks and one split more, and a kernel whose
// blocks take every resident slot is measurably slower (results/gpu-kernel-tuning.md §7.5; the
// engine's caches, with room for the steps to come, give the plain kernel 33 splits too). Then
// explicit layouts: the decider as large as the other chunks (which needs one split more than fits
// at once), and a smaller decider.
BENCHMARK(BM_ArtOverhead)
    ->Args({4096, 0, 0, 0})
    ->Args({32768, 0, 0, 0})
    ->Args({131072, 0, 0, 0})
    ->Args({32768, 0, 0, 1})
    ->Args({131072, 0, 0, 1})
    ->Args({4096, 2, 2, 0})
    ->Args({32768, 16, 16, 0})
    ->Args({32768, 4, 16, 0})
    ->Args({131072, 64, 64, 0})
    ->Args({131072, 16, 64, 0})
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_ArtTermination(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  Setup setup(static_cast<int>(state.range(0)), true);
  for (auto& e : setup.art) e.decider_blocks = static_cast<int>(state.range(1));
  auto plain = [&](int c) { cuda::decode_attention(setup.plain[c], nullptr); };
  auto art = [&](int c) { cuda::early_exit_decode(setup.art[c], nullptr); };
  time_us(setup, plain);
  time_us(setup, art);
  double plain_total = 0, art_total = 0;
  int iterations = 0;
  for (auto _ : state) {
    const double p = time_us(setup, plain);
    const double a = time_us(setup, art);
    plain_total += p;
    art_total += a;
    ++iterations;
    state.SetIterationTime(a / 1e6);
  }
  cuda::check(cudaDeviceSynchronize(), "bench");
  std::vector<int32_t> words(size_t(kHkv) * cuda::kStateWords);
  setup.state.download(words.data(), words.size() * 4);
  double visited = 0, total = 0, loaded = 0;
  for (int h = 0; h < kHkv; ++h) {
    visited += words[h * cuda::kStateWords + cuda::kBlocksVisited];
    total += words[h * cuda::kStateWords + cuda::kBlocksTotal];
    loaded += words[h * cuda::kStateWords + cuda::kBlocksLoaded];
  }
  state.counters["plain_us"] = plain_total / iterations;
  state.counters["art_us"] = art_total / iterations;
  state.counters["speedup"] = plain_total / art_total;
  state.counters["skipped"] = 1.0 - visited / total;
  state.counters["work_skipped"] = 1.0 - loaded / total;
  set_layout_counters(state, setup.art[0]);
}
BENCHMARK(BM_ArtTermination)
    ->Args({4096, 0})
    ->Args({4096, 8})
    ->Args({32768, 0})
    ->Args({32768, 16})
    ->Args({131072, 0})
    ->Args({131072, 64})
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvb

BENCHMARK_MAIN();
