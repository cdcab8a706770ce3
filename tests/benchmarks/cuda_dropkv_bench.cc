// DropKV scoring on the GPU (Llama-3.1-8B shapes: Hq 32, Hkv 8, d 128, window 8), one layer:
// the fused path (window flash forward + streaming scorer + pooling + top-k) against the
// materialising baseline in the same run; reports the speed-up and both scratch footprints, and
// each stage's time, the window forward's and the scorer's beside their floor
// (window_read_bound_ms: the layer's K and V read once at the read bandwidth measured in the same
// run; each of the two reads them once).
#include <benchmark/benchmark.h>

#include <cmath>
#include <functional>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dropkv_scores.h"
#include "kernels/cuda/topk_select.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/benchmarks/cuda_timing.h"

namespace kvb {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kHq = 32, kHkv = 8, kD = 128, kWindow = 8, kPoolKernel = 11;

struct LayerInputs {
  explicit LayerInputs(int length)
      : length(length),
        keep(std::max(kWindow, int(0.05 * length))),
        q(size_t(kWindow) * kHq * kD * 2),
        y(size_t(kWindow) * kHq * kD * 2),
        lse(size_t(kHq) * kWindow * 4),
        k(size_t(kHkv) * length * kD * 2),
        v(size_t(kHkv) * length * kD * 2),
        scores(size_t(kHkv) * length * 4),
        kept(size_t(kHkv) * keep * 4),
        topk(cuda::topk_select_workspace_bytes(kHkv, length, cuda::TopkKeys::kF32)),
        pool(cuda::pool_and_protect_workspace_bytes(kHkv, length, kPoolKernel)),
        window_workspace(cuda::prefill_split_kv_workspace_bytes(window_args())) {
    cuda::fill_random_bf16(q.as<bf16>(), size_t(kWindow) * kHq * kD, 1, 1.f, nullptr);
    cuda::fill_random_bf16(k.as<bf16>(), size_t(kHkv) * length * kD, 2, 1.f, nullptr);
    cuda::fill_random_bf16(v.as<bf16>(), size_t(kHkv) * length * kD, 3, 1.f, nullptr);
  }
  // The window forward as DropKV runs it: with a workspace, so its 8 queries after the prefix run
  // split-KV.
  void window_forward() {
    cuda::PrefillAttentionArgs a = window_args();
    a.workspace = window_workspace.data();
    cuda::prefill_attention(a, nullptr);
  }
  cuda::PrefillAttentionArgs window_args() {
    cuda::PrefillAttentionArgs a;
    a.q = q.as<bf16>();
    a.q_row_stride = kHq * kD;
    a.k = k.as<bf16>();
    a.v = v.as<bf16>();
    a.kv_head_stride = int64_t(length) * kD;
    a.out = y.as<bf16>();
    a.out_row_stride = kHq * kD;
    a.lse = lse.as<float>();
    a.n_queries = kWindow;
    a.query_offset = length - kWindow;
    a.n_query_heads = kHq;
    a.n_kv_heads = kHkv;
    a.head_dim = kD;
    a.scale = 1.f / std::sqrt(float(kD));
    return a;
  }
  cuda::DropKvScoreArgs score_args() {
    cuda::DropKvScoreArgs s;
    s.queries = q.as<bf16>();
    s.outputs = y.as<bf16>();
    s.row_stride = kHq * kD;
    s.lse = lse.as<float>();
    s.keys = k.as<bf16>();
    s.values = v.as<bf16>();
    s.head_stride = int64_t(length) * kD;
    s.n_query_heads = kHq;
    s.n_kv_heads = kHkv;
    s.head_dim = kD;
    s.length = length;
    s.window = kWindow;
    s.scores = scores.as<float>();
    return s;
  }
  // The scores are pooled in place and the kept lists hold k entries per head.
  size_t fused_scratch_bytes() const {
    return scores.bytes() + kept.bytes() + topk.bytes() + pool.bytes() + y.bytes() + lse.bytes() +
           window_workspace.bytes();
  }
  int length, keep;
  cuda::DeviceBuffer q, y, lse, k, v, scores, kept, topk, pool, window_workspace;
};

// The device's read bandwidth, measured once per run.
double read_bandwidth_gbs() {
  static const double measured = cuda::measure_read_bandwidth_gbs(size_t(4) << 30, 10);
  return measured;
}

void BM_DropKvFused(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  LayerInputs in(static_cast<int>(state.range(0)));
  bench::CudaEventTimer timer;
  auto select = [&] {
    cuda::pool_and_protect(in.scores.as<float>(), in.scores.as<float>(), kHkv, in.length,
                           kPoolKernel, true, kWindow, in.pool.data(), nullptr);
    cuda::TopkSelectArgs top;
    top.scores = in.scores.as<float>();
    top.key_stride = in.length;
    top.n_lists = kHkv;
    top.length = in.length;
    top.k = in.keep;
    top.indices = in.kept.as<int32_t>();
    top.index_stride = in.keep;
    top.workspace = in.topk.data();
    top.workspace_bytes = in.topk.bytes();
    cuda::topk_select(top, nullptr);
  };
  auto run = [&] {
    in.window_forward();
    cuda::dropkv_scores(in.score_args(), nullptr);
    select();
  };
  run();
  for (auto _ : state) state.SetIterationTime(timer.time_ms(run) / 1e3);
  // Each stage alone (one launch each, after the timed loop): where the fused path's time goes.
  auto stage_ms = [&](const std::function<void()>& stage) { return timer.time_ms(stage); };
  state.counters["window_ms"] = stage_ms([&] { in.window_forward(); });
  // The split-KV window forward reads each KV head's keys and values once: its floor, and the
  // scorer's.
  const double kv_bytes = 2.0 * kHkv * in.length * kD * sizeof(bf16);
  state.counters["window_read_bound_ms"] = kv_bytes / (read_bandwidth_gbs() * 1e6);
  // The same window forward without a workspace: the prefill kernel, one block per query head.
  state.counters["window_prefill_kernel_ms"] =
      stage_ms([&] { cuda::prefill_attention(in.window_args(), nullptr); });
  state.counters["scorer_ms"] = stage_ms([&] { cuda::dropkv_scores(in.score_args(), nullptr); });
  state.counters["select_ms"] = stage_ms(select);
  state.counters["scratch_MB"] = in.fused_scratch_bytes() / 1e6;
}
BENCHMARK(BM_DropKvFused)
    ->Arg(4096)
    ->Arg(32768)
    ->Arg(131072)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_DropKvMaterialised(benchmark::State& state) {
  if (!cuda::device_available()) return state.SkipWithError("no CUDA device");
  LayerInputs in(static_cast<int>(state.range(0)));
  bench::CudaEventTimer timer;
  size_t scratch = 0;
  for (auto _ : state) {
    const float ms = timer.time_ms([&] {
      in.window_forward();
      scratch = cuda::dropkv_scores_materialised(in.score_args(), nullptr);
    });
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["scratch_MB"] = scratch / 1e6;
}
BENCHMARK(BM_DropKvMaterialised)
    ->Arg(4096)
    ->Arg(32768)
    ->Arg(131072)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace kvb

BENCHMARK_MAIN();
