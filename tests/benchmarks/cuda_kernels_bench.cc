// GPU kernel lab figures: prefill flash attention in TFLOP/s against the measured bf16 GEMM rate,
// H2O's attention column sums in TFLOP/s (of q·k) and in time against that prefill's, the window
// sums with the bf16 reference's casts against the fp32 ones, decode
// attention in GB/s against the measured read bandwidth (Llama-3.1-8B head shapes), and over ragged
// rows the split by the rows' lengths against the automatic one.
// Run on the GPU machine: ./cuda_kernels_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_column_sums.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/transformer_ops.h"
#include "kernels/cuda/window_attention_sums.h"
#include "tests/benchmarks/cuda_timing.h"

namespace kvb {
namespace {

using bf16 = __nv_bfloat16;

struct Ceilings {
  double bandwidth_gbs = 0;
  double gemm_tflops = 0;
};

const Ceilings& ceilings() {
  static const Ceilings measured = [] {
    Ceilings c;
    c.bandwidth_gbs = cuda::measure_read_bandwidth_gbs(size_t(4) << 30, 10);
    cublasHandle_t handle;
    cublasCreate(&handle);
    c.gemm_tflops = cuda::measure_gemm_tflops(handle, 8192, 5);
    cublasDestroy(handle);
    return c;
  }();
  return measured;
}

struct PrefillInputs {
  static constexpr int hq = 32, hkv = 8, d = 128;
  explicit PrefillInputs(int n)
      : q(size_t(n) * hq * d * 2),
        k(size_t(n) * hkv * d * 2),
        v(size_t(n) * hkv * d * 2),
        out(size_t(n) * hq * d * 2),
        lse(size_t(n) * hq * 4) {
    cuda::fill_random_bf16(q.as<bf16>(), size_t(n) * hq * d, 1, 1.f, nullptr);
    cuda::fill_random_bf16(k.as<bf16>(), size_t(n) * hkv * d, 2, 1.f, nullptr);
    cuda::fill_random_bf16(v.as<bf16>(), size_t(n) * hkv * d, 3, 1.f, nullptr);
    args = {.q = q.as<bf16>(),
            .q_row_stride = hq * d,
            .k = k.as<bf16>(),
            .v = v.as<bf16>(),
            .kv_head_stride = int64_t(n) * d,
            .out = out.as<bf16>(),
            .out_row_stride = hq * d,
            .lse = lse.as<float>(),
            .n_queries = n,
            .n_query_heads = hq,
            .n_kv_heads = hkv,
            .head_dim = d,
            .scale = 1.f / std::sqrt(float(d))};
  }
  cuda::DeviceBuffer q, k, v, out, lse;
  cuda::PrefillAttentionArgs args;
};

// Mean milliseconds of `reps` consecutive calls of `call`.
template <class Call>
float mean_ms(Call call, int reps) {
  bench::CudaEventTimer timer;
  return timer.time_ms([&] {
    for (int i = 0; i < reps; ++i) call();
  }) / reps;
}

void BM_FlashPrefill(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  const int n = static_cast<int>(state.range(0));
  PrefillInputs in(n);
  const auto prefill = [&] { cuda::prefill_attention(in.args, nullptr); };
  prefill();
  for (auto _ : state) state.SetIterationTime(mean_ms(prefill, 1) / 1e3);
  // Causal: half of the n x n score matrix, two matmuls of 2 FLOP per multiply-add.
  const double flops = 4.0 * in.hq * in.d * (double(n) * n / 2);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_ceiling_TFLOP/s"] = ceilings().gemm_tflops;
}
BENCHMARK(BM_FlashPrefill)->Arg(4096)->Arg(32768)->UseManualTime()->Unit(benchmark::kMillisecond);

// The column sums after a prefill of n tokens (one chunk), fed that prefill's LSE: TFLOP/s of its
// q·k products (half the prefill's) and its time over the prefill's, measured in the same run.
void BM_AttentionColumnSums(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  const int n = static_cast<int>(state.range(0));
  PrefillInputs in(n);
  cuda::DeviceBuffer sums(size_t(n) * in.hq * 4);
  cudaMemset(sums.data(), 0, sums.bytes());
  cuda::ColumnSumsArgs a{.q = in.q.as<bf16>(),
                         .q_row_stride = in.hq * in.d,
                         .k = in.k.as<bf16>(),
                         .kv_head_stride = int64_t(n) * in.d,
                         .lse = in.lse.as<float>(),
                         .column_sums = sums.as<float>(),
                         .sums_head_stride = n,
                         .n_queries = n,
                         .n_query_heads = in.hq,
                         .n_kv_heads = in.hkv,
                         .head_dim = in.d};
  const auto prefill = [&] { cuda::prefill_attention(in.args, nullptr); };
  const auto column_sums = [&] { cuda::attention_column_sums(a, nullptr); };
  prefill();
  const float prefill_ms = mean_ms(prefill, 5);
  column_sums();
  for (auto _ : state) state.SetIterationTime(mean_ms(column_sums, 1) / 1e3);
  const double flops = 2.0 * in.hq * in.d * (double(n) * n / 2);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["prefill_ms"] = prefill_ms;
  state.counters["gemm_ceiling_TFLOP/s"] = ceilings().gemm_tflops;
}
BENCHMARK(BM_AttentionColumnSums)
    ->Arg(4096)
    ->Arg(32768)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// SnapKV-family window sums (w = 32 window queries, Llama-3.1-8B heads) with the bf16 reference's
// casts (window_attention_sums: its own two passes over the rounded logits on the CUDA cores),
// beside the fp32 sums from a given log-sum-exp (attention_column_sums over the window rows, tensor
// cores) in the same run; ratio_to_fp32 is the first over the second. Per layer.
void BM_WindowAttentionSums(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  const int n = static_cast<int>(state.range(0));
  constexpr int w = 32, hq = 32, hkv = 8, d = 128;
  cuda::DeviceBuffer q(size_t(w) * hq * d * 2), k(size_t(n) * hkv * d * 2), lse(size_t(w) * hq * 4),
      sums(size_t(n) * hq * 4), workspace(cuda::window_attention_sums_workspace_bytes(hq, n, w));
  cuda::fill_random_bf16(q.as<bf16>(), size_t(w) * hq * d, 1, 1.f, nullptr);
  cuda::fill_random_bf16(k.as<bf16>(), size_t(n) * hkv * d, 2, 1.f, nullptr);
  cudaMemset(lse.data(), 0, lse.bytes());
  cuda::WindowAttentionSumsArgs casts;
  casts.queries = q.as<bf16>();
  casts.query_row_stride = hq * d;
  casts.query_head_stride = d;
  casts.keys = k.as<bf16>();
  casts.kv_head_stride = int64_t(n) * d;
  casts.sums = sums.as<float>();
  casts.sums_head_stride = n;
  casts.length = n;
  casts.window = w;
  casts.n_query_heads = hq;
  casts.n_kv_heads = hkv;
  casts.head_dim = d;
  casts.reference_bf16_casts = true;
  casts.workspace = workspace.data();
  const cuda::ColumnSumsArgs fp32{.q = q.as<bf16>(),
                                  .q_row_stride = hq * d,
                                  .k = k.as<bf16>(),
                                  .kv_head_stride = int64_t(n) * d,
                                  .lse = lse.as<float>(),
                                  .column_sums = sums.as<float>(),
                                  .sums_head_stride = n,
                                  .n_queries = w,
                                  .query_offset = n - w,
                                  .n_query_heads = hq,
                                  .n_kv_heads = hkv,
                                  .head_dim = d};
  const auto with_casts = [&] { cuda::window_attention_sums(casts, nullptr); };
  const auto without = [&] { cuda::attention_column_sums(fp32, nullptr); };
  without();
  const float fp32_ms = mean_ms(without, 5);
  with_casts();
  float casts_ms = 0;
  for (auto _ : state) {
    casts_ms = mean_ms(with_casts, 1);
    state.SetIterationTime(casts_ms / 1e3);
  }
  state.counters["fp32_ms"] = fp32_ms;
  state.counters["ratio_to_fp32"] = casts_ms / fp32_ms;
}
BENCHMARK(BM_WindowAttentionSums)
    ->Arg(32768)
    ->Arg(131072)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Random bf16 queries, keys and values of Llama-3.1-8B's heads (32 query heads, 8 KV heads, head
// dim 128) for `batch` sequences whose (sequence, KV head) rows hold `lengths` keys each, laid out
// one after another, and the decode_attention arguments over them.
struct DecodeAttentionInputs {
  static constexpr int kQueryHeads = 32, kKvHeads = 8, kHeadDim = 128;
  DecodeAttentionInputs(int batch, const std::vector<int32_t>& lengths) {
    std::vector<int64_t> offsets(lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      offsets[i] = rows;
      rows += lengths[i];
    }
    const int longest = *std::max_element(lengths.begin(), lengths.end());
    const size_t query_elements = size_t(batch) * kQueryHeads * kHeadDim;
    q = cuda::DeviceBuffer(query_elements * 2);
    k = cuda::DeviceBuffer(size_t(rows) * kHeadDim * 2);
    v = cuda::DeviceBuffer(size_t(rows) * kHeadDim * 2);
    out = cuda::DeviceBuffer(query_elements * 2);
    workspace = cuda::DeviceBuffer(
        cuda::decode_attention_workspace_floats(batch, kQueryHeads, kHeadDim, longest) * 4);
    cuda::fill_random_bf16(q.as<bf16>(), query_elements, 1, 1.f, nullptr);
    cuda::fill_random_bf16(k.as<bf16>(), size_t(rows) * kHeadDim, 2, 1.f, nullptr);
    cuda::fill_random_bf16(v.as<bf16>(), size_t(rows) * kHeadDim, 3, 1.f, nullptr);
    kv_offset = cuda::DeviceBuffer(offsets.size() * 8);
    kv_length = cuda::DeviceBuffer(lengths.size() * 4);
    kv_offset.upload(offsets.data(), offsets.size() * 8);
    kv_length.upload(lengths.data(), lengths.size() * 4);
    args = {.q = q.as<bf16>(),
            .q_seq_stride = kQueryHeads * kHeadDim,
            .k = k.as<bf16>(),
            .v = v.as<bf16>(),
            .kv_offset = kv_offset.as<int64_t>(),
            .kv_length = kv_length.as<int32_t>(),
            .max_kv_length = longest,
            .out = out.as<bf16>(),
            .out_seq_stride = kQueryHeads * kHeadDim,
            .batch = batch,
            .n_query_heads = kQueryHeads,
            .n_kv_heads = kKvHeads,
            .head_dim = kHeadDim,
            .scale = 1.f / std::sqrt(float(kHeadDim)),
            .workspace = workspace.as<float>(),
            .append = {}};
  }

  // One decode_attention call split into `chunk`-key chunks (0: the automatic split), in ms.
  float timed_ms(int chunk) {
    args.chunk_size = chunk;
    return timer.time_ms([&] { cuda::decode_attention(args, nullptr); });
  }
  // GB/s of every key and value read once, and its ratio to the measured read bandwidth.
  void set_read_counters(benchmark::State& state) const {
    const double gigabytes = double(rows) * kHeadDim * 2 * 2 / 1e9;
    state.counters["GB/s"] =
        benchmark::Counter(gigabytes, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["ratio_to_read_bw"] = benchmark::Counter(
        gigabytes / ceilings().bandwidth_gbs, benchmark::Counter::kIsIterationInvariantRate);
  }

  int64_t rows = 0;
  cuda::DeviceBuffer q, k, v, out, workspace, kv_offset, kv_length;
  cuda::DecodeAttentionArgs args;
  bench::CudaEventTimer timer;
};

void BM_DecodeAttention(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  const int length = static_cast<int>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  DecodeAttentionInputs inputs(
      batch, std::vector<int32_t>(batch * DecodeAttentionInputs::kKvHeads, length));
  inputs.timed_ms(0);
  for (auto _ : state) state.SetIterationTime(inputs.timed_ms(0) / 1e3);
  inputs.set_read_counters(state);
}
BENCHMARK(BM_DecodeAttention)
    ->Args({4096, 1})
    ->Args({32768, 1})
    ->Args({131072, 1})
    ->Args({4096, 16})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// A batched decode step's attention over ragged rows: `batch` cells of a 32K prompt compressed to
// 10% (even cells) and 20% (odd cells), as configs/gpu-throughput.json's cells are. The automatic
// split (cut by the longest row) against the split by the rows' own lengths
// (cuda::dense_decode_chunk), alternated in each iteration; the figure is the latter's.
void BM_DecodeAttentionRagged(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  const int batch = static_cast<int>(state.range(0));
  std::vector<int32_t> lengths(batch * DecodeAttentionInputs::kKvHeads);
  for (size_t i = 0; i < lengths.size(); ++i)
    lengths[i] = (i / DecodeAttentionInputs::kKvHeads) % 2 == 0 ? 3277 : 6554;
  DecodeAttentionInputs inputs(batch, lengths);
  const int by_lengths = cuda::dense_decode_chunk(inputs.args, lengths.data(), int(lengths.size()));
  inputs.timed_ms(0);
  inputs.timed_ms(by_lengths);
  double automatic_ms = 0, split_ms = 0;
  for (auto _ : state) {
    automatic_ms += inputs.timed_ms(0);
    const float ms = inputs.timed_ms(by_lengths);
    split_ms += ms;
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["chunk"] = by_lengths;
  inputs.set_read_counters(state);
  state.counters["speedup_vs_automatic"] = automatic_ms / split_ms;
}
BENCHMARK(BM_DecodeAttentionRagged)
    ->Arg(10)
    ->Arg(16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvb

BENCHMARK_MAIN();
