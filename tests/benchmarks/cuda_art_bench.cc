// ART decode kernel (kernels/cuda/early_exit_decode.h) against the plain flash-decoding kernel
// (decode_attention) in the same run, one layer's cache at batch 1, at two model shapes:
// Llama-3.1-8B (Hq 32, Hkv 8, d 128) and Qwen2.5-0.5B (Hq 14, Hkv 2, d 64: group 7).
// Run on the GPU machine: ./cuda_art_bench --benchmark_counters_tabular=true
//
// BM_Art/model/n/mode: model 0 = Llama-3.1-8B shapes, 1 = Qwen2.5-0.5B shapes; n = cache entries;
//   mode 0 = stop off (enabled = false: the whole walk and the decision of every block, never
//   acted on; random K/V), 1 = stop on over the same random K/V (diffuse attention: nothing
//   stops, the cost of a live decision), 2 = stop on over a sink-and-recent profile (stops).
//   Counters: plain_us, art_us, ratio = art/plain (1.00 = the plain kernel's speed), skipped =
//   1 - visited/total blocks, chunk and splits (the walk's layout), segment and segments (the
//   decision's).
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
#include "tests/benchmarks/cuda_timing.h"

namespace kvb {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kRepeats = 20;

struct Shape {
  int hq, hkv, d;
};
constexpr Shape kShapes[] = {{32, 8, 128}, {14, 2, 64}};  // Llama-3.1-8B, Qwen2.5-0.5B

uint16_t bf16_bits(float x) {
  const bf16 value = __float2bfloat16(x);
  uint16_t bits;
  std::memcpy(&bits, &value, 2);
  return bits;
}

struct Setup {
  Shape shape;
  int n = 0, copies = 1;
  cuda::DeviceBuffer q, k, v, out, workspace, offsets, lengths, state, totals;
  std::vector<cuda::DecodeAttentionArgs> plain;
  std::vector<cuda::EarlyExitDecodeArgs> art;

  Setup(Shape s, int length, bool profile) : shape(s), n(length) {
    const size_t copy_bytes = size_t(s.hkv) * n * s.d * 2 * 2;
    copies = std::max<int>(1, int((size_t(200) << 20) / copy_bytes) + 1);
    const size_t rows = size_t(copies) * s.hkv * n;
    q = cuda::DeviceBuffer(size_t(s.hq) * s.d * 2);
    k = cuda::DeviceBuffer(rows * s.d * 2);
    v = cuda::DeviceBuffer(rows * s.d * 2);
    out = cuda::DeviceBuffer(size_t(s.hq) * s.d * 2);
    workspace =
        cuda::DeviceBuffer(std::max(cuda::decode_attention_workspace_floats(1, s.hq, s.d, n),
                                    cuda::early_exit_decode_workspace_floats(1, s.hq, s.d, n)) *
                           4);
    cuda::fill_random_bf16(k.as<bf16>(), rows * s.d, 2, profile ? 0.5f : 1.f, nullptr);
    cuda::fill_random_bf16(v.as<bf16>(), rows * s.d, 3, 1.f, nullptr);
    if (profile) {
      shape_profile();
    } else {
      cuda::fill_random_bf16(q.as<bf16>(), size_t(s.hq) * s.d, 1, 1.f, nullptr);
    }
    std::vector<int64_t> offset(size_t(copies) * s.hkv);
    for (size_t i = 0; i < offset.size(); ++i) offset[i] = int64_t(i) * n;
    offsets = cuda::DeviceBuffer(offset.size() * 8);
    offsets.upload(offset.data(), offset.size() * 8);
    std::vector<int32_t> length_of(s.hkv, n);
    lengths = cuda::DeviceBuffer(length_of.size() * 4);
    lengths.upload(length_of.data(), length_of.size() * 4);
    state = cuda::DeviceBuffer(size_t(s.hkv) * cuda::kStateWords * 4);
    cuda::check(cudaMemset(state.data(), 0, state.bytes()), "memset");
    totals = cuda::DeviceBuffer(3 * 8);
    cuda::check(cudaMemset(totals.data(), 0, totals.bytes()), "memset");
    for (int c = 0; c < copies; ++c) {
      cuda::DecodeAttentionArgs a;
      a.q = q.as<bf16>();
      a.q_seq_stride = s.hq * s.d;
      a.k = k.as<bf16>();
      a.v = v.as<bf16>();
      a.kv_offset = offsets.as<int64_t>() + c * s.hkv;
      a.kv_length = lengths.as<int32_t>();
      a.max_kv_length = n;
      a.out = out.as<bf16>();
      a.out_seq_stride = s.hq * s.d;
      a.batch = 1;
      a.n_query_heads = s.hq;
      a.n_kv_heads = s.hkv;
      a.head_dim = s.d;
      a.scale = 1.f / std::sqrt(float(s.d));
      a.workspace = workspace.as<float>();
      plain.push_back(a);
      cuda::EarlyExitDecodeArgs e;
      e.attention = a;
      e.walker_state = state.as<int32_t>();
      e.totals = totals.as<unsigned long long>();
      art.push_back(e);
    }
    cuda::check(cudaDeviceSynchronize(), "setup");
  }

  // Queries along a shared direction per group; sink and recent keys of every copy along it.
  void shape_profile() {
    const int d = shape.d, group = shape.hq / shape.hkv;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> unit(-1.f, 1.f);
    std::vector<uint16_t> q_bits(size_t(shape.hq) * d);
    for (int h = 0; h < shape.hkv; ++h) {
      std::vector<float> c(d);
      double norm2 = 0;
      for (auto& x : c) {
        x = unit(rng);
        norm2 += x * x;
      }
      for (int a = h * group; a < (h + 1) * group; ++a)
        for (int i = 0; i < d; ++i) q_bits[size_t(a) * d + i] = bf16_bits(c[i] + 0.05f * unit(rng));
      auto key_row = [&](float lambda) {
        std::vector<uint16_t> row(d);
        for (int i = 0; i < d; ++i)
          row[i] = bf16_bits(0.5f * unit(rng) + lambda * c[i] * std::sqrt(float(d)) / float(norm2));
        return row;
      };
      for (int copy = 0; copy < copies; ++copy) {
        const size_t first_row = (size_t(copy) * shape.hkv + h) * n;
        for (int j = 0; j < n; ++j) {
          const bool sink = j < 4, recent = j >= n - 48;
          if (!sink && !recent) continue;
          const auto row = key_row(sink ? 16.f : 10.f);
          k.upload(row.data(), d * 2, (first_row + j) * d * 2);
        }
      }
    }
    q.upload(q_bits.data(), q_bits.size() * 2);
  }
};

template <typename Launch>
double time_us(Setup& setup, Launch launch) {
  bench::CudaEventTimer timer;
  return timer.time_ms([&] {
    for (int r = 0; r < kRepeats; ++r) launch(r % setup.copies);
  }) * 1e3 /
         kRepeats;
}

// Args: model (index into kShapes), n, mode (0 stop off, 1 stop on over random K/V, 2 stop on
// over the profile).
void BM_Art(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  const int mode = static_cast<int>(state.range(2));
  Setup setup(kShapes[state.range(0)], static_cast<int>(state.range(1)), mode == 2);
  for (auto& e : setup.art) e.options.enabled = mode != 0;
  auto plain = [&](int c) { cuda::decode_attention(setup.plain[c], nullptr); };
  auto art = [&](int c) { cuda::early_exit_decode(setup.art[c], nullptr); };
  time_us(setup, plain);  // warm-up (and kernel attributes)
  time_us(setup, art);
  cuda::check(cudaDeviceSynchronize(), "warm-up");
  cuda::check(cudaMemset(setup.totals.data(), 0, setup.totals.bytes()), "memset");
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
  unsigned long long words[3] = {0, 0, 0};
  setup.totals.download(words, sizeof(words));
  const cuda::EarlyExitDecodeArgs& layout = setup.art[0];
  state.counters["plain_us"] = plain_total / iterations;
  state.counters["art_us"] = art_total / iterations;
  state.counters["ratio"] = art_total / plain_total;
  state.counters["skipped"] = words[1] > 0 ? 1.0 - double(words[0]) / double(words[1]) : 0.0;
  state.counters["chunk"] = cuda::early_exit_chunk_blocks(layout);
  state.counters["splits"] = cuda::early_exit_splits(layout);
  state.counters["segment"] = cuda::early_exit_segment_blocks(layout);
  state.counters["segments"] = cuda::early_exit_segments(layout);
}
BENCHMARK(BM_Art)
    ->ArgsProduct({{0, 1}, {4096, 32768, 131072}, {0, 1, 2}})
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvb

BENCHMARK_MAIN();
