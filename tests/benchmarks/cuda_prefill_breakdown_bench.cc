// Where a long prefill's time goes (TTFT, kvbench issue #7): every kernel of the CUDA engine's
// prefill at Llama-3.1-8B shapes (bf16, B=1), timed with CUDA events on one chunk of the engine's
// chunk size and summed over 32 layers and all chunks, so attention, the GEMMs and everything else
// can be set against the measured TTFT. The causal attention is also timed alone for both prefill
// kernels (mma.sync and, on Hopper, wgmma) with its TFLOP/s, against the cuBLAS GEMM rate measured
// in the same run. Run on the GPU machine: ./cuda_prefill_breakdown_bench [context] [chunk]
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/benchmarks/cuda_timing.h"

namespace kvb {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kLayers = 32, kModel = 4096, kHeadsQ = 32, kHeadsKv = 8, kHeadDim = 128;
constexpr int kFfn = 14336;
constexpr int kQkvWidth = (kHeadsQ + 2 * kHeadsKv) * kHeadDim;

// Median milliseconds of `launch` over a few repetitions (after one warm-up).
double time_ms(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream, int reps = 5) {
  bench::CudaEventTimer timer;
  launch(stream);
  std::vector<float> samples;
  for (int rep = 0; rep < reps; ++rep)
    samples.push_back(timer.time_ms([&] { launch(stream); }, stream));
  cuda::check(cudaGetLastError(), "timed launch");
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Causal attention FLOPs of n queries after `offset` keys (QK^T and PV, 2 FLOP per MAC).
double attention_flops(int n, int offset) {
  const double visible = double(n) * offset + double(n) * (n + 1) / 2;
  return 4.0 * visible * kHeadDim * kHeadsQ;
}

int run(int context, int chunk) {
  if (!cuda::device_available()) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  chunk = std::min(chunk, context);
  cublasHandle_t cublas;
  cublasCreate(&cublas);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cublasSetStream(cublas, stream);
  const double gemm_tflops = cuda::measure_gemm_tflops(cublas, 8192, 5);

  // One layer's weights (compute-bound at these row counts: reusing them changes nothing).
  auto random_buffer = [&](size_t count, uint64_t seed, float scale) {
    cuda::DeviceBuffer b(count * 2, "bench buffer");
    cuda::fill_random_bf16(b.as<bf16>(), count, seed, scale, stream);
    return b;
  };
  auto wqkv = random_buffer(size_t(kQkvWidth) * kModel, 1, 0.02f);
  auto wo = random_buffer(size_t(kModel) * kModel, 2, 0.02f);
  auto w_gate_up = random_buffer(size_t(2) * kFfn * kModel, 3, 0.02f);
  auto w_down = random_buffer(size_t(kModel) * kFfn, 4, 0.02f);
  auto norm_weight = random_buffer(kModel, 5, 1.0f);
  auto normed = random_buffer(size_t(chunk) * kModel, 6, 1.0f);
  auto qkv = random_buffer(size_t(chunk) * kQkvWidth, 7, 1.0f);
  auto attn_out = random_buffer(size_t(chunk) * kModel, 8, 1.0f);
  auto ffn_out = random_buffer(size_t(chunk) * kModel, 9, 0.1f);
  auto gate_up = random_buffer(size_t(chunk) * 2 * kFfn, 10, 1.0f);
  auto act = random_buffer(size_t(chunk) * kFfn, 11, 1.0f);
  auto k_cache = random_buffer(size_t(kHeadsKv) * context * kHeadDim, 12, 1.0f);
  auto v_cache = random_buffer(size_t(kHeadsKv) * context * kHeadDim, 13, 1.0f);
  cuda::DeviceBuffer residual(size_t(chunk) * kModel * 4, "residual");
  cuda::check(cudaMemsetAsync(residual.data(), 0, residual.bytes(), stream), "memset");
  std::vector<int32_t> positions(chunk);
  for (int i = 0; i < chunk; ++i) positions[i] = i;
  cuda::DeviceBuffer d_positions(chunk * 4, "positions");
  d_positions.upload(positions.data(), chunk * 4);
  std::vector<float> freq(kHeadDim / 2);
  for (int i = 0; i < kHeadDim / 2; ++i) freq[i] = std::pow(500000.f, -2.f * i / kHeadDim);
  cuda::DeviceBuffer inv_freq(freq.size() * 4, "inv_freq");
  inv_freq.upload(freq.data(), freq.size() * 4);
  std::vector<int64_t> offsets(kHeadsKv);
  for (int h = 0; h < kHeadsKv; ++h) offsets[h] = int64_t(h) * context;
  cuda::DeviceBuffer d_offsets(kHeadsKv * 8, "offsets"), d_lengths(kHeadsKv * 4, "lengths");
  d_offsets.upload(offsets.data(), kHeadsKv * 8);
  cuda::check(cudaMemsetAsync(d_lengths.data(), 0, kHeadsKv * 4, stream), "memset");
  cuda::DeviceBuffer lse(size_t(kHeadsQ) * chunk * 4, "lse");

  auto attention = [&](int n, int offset, cuda::PrefillKernel kernel) {
    return [&, n, offset, kernel](cudaStream_t s) {
      cuda::PrefillAttentionArgs a;
      a.q = qkv.as<bf16>();
      a.q_row_stride = kQkvWidth;
      a.k = k_cache.as<bf16>();
      a.v = v_cache.as<bf16>();
      a.kv_head_stride = int64_t(context) * kHeadDim;
      a.out = attn_out.as<bf16>();
      a.out_row_stride = kModel;
      a.n_queries = n;
      a.query_offset = offset;
      a.n_query_heads = kHeadsQ;
      a.n_kv_heads = kHeadsKv;
      a.head_dim = kHeadDim;
      a.scale = 1.f / std::sqrt(float(kHeadDim));
      a.kernel = kernel;
      cuda::prefill_attention(a, s);
    };
  };

  std::printf("Llama-3.1-8B shapes, B=1, context %d in chunks of %d; cuBLAS GEMM %.0f TFLOP/s\n",
              context, chunk, gemm_tflops);
  // Attention alone, both kernels, at the shapes that matter.
  const bool have_wgmma = cuda::wgmma_prefill_available(kHeadDim);
  struct Shape {
    int n, offset;
  };
  std::vector<Shape> shapes = {{std::min(4096, chunk), 0}, {chunk, 0}};
  if (context >= 2 * chunk) shapes.push_back({chunk, context - chunk});
  for (const Shape& shape : shapes) {
    const double flops = attention_flops(shape.n, shape.offset);
    for (auto kernel : {cuda::PrefillKernel::kMmaSync, cuda::PrefillKernel::kWgmma}) {
      if (kernel == cuda::PrefillKernel::kWgmma && !have_wgmma) continue;
      const double ms = time_ms(attention(shape.n, shape.offset, kernel), stream);
      std::printf(
          "attention %-7s n=%-6d offset=%-6d %9.3f ms  %6.1f TFLOP/s  (%.2f of the GEMM rate)\n",
          kernel == cuda::PrefillKernel::kWgmma ? "wgmma" : "mma", shape.n, shape.offset, ms,
          flops / ms / 1e9, flops / ms / 1e9 / gemm_tflops);
    }
  }

  // Whole prefill, per kind of work: each kernel of one layer for each chunk, times 32 layers.
  double gemm_ms = 0, attention_ms = 0, other_ms = 0;
  double gemm_flops = 0, total_attention_flops = 0;
  for (int begin = 0; begin < context; begin += chunk) {
    const int n = std::min(chunk, context - begin);
    auto gemm = [&](const bf16* x, const cuda::DeviceBuffer& w, bf16* y, int in, int out) {
      gemm_flops += 2.0 * n * in * out * kLayers;
      return time_ms(
                 [&, x, y, in, out](cudaStream_t s) {
                   cuda::matmul(cublas, x, w.as<bf16>(), y, n, in, out, s);
                 },
                 stream) *
             kLayers;
    };
    gemm_ms += gemm(normed.as<bf16>(), wqkv, qkv.as<bf16>(), kModel, kQkvWidth);
    gemm_ms += gemm(attn_out.as<bf16>(), wo, ffn_out.as<bf16>(), kModel, kModel);
    gemm_ms += gemm(normed.as<bf16>(), w_gate_up, gate_up.as<bf16>(), kModel, 2 * kFfn);
    gemm_ms += gemm(act.as<bf16>(), w_down, ffn_out.as<bf16>(), kFfn, kModel);
    attention_ms += time_ms(attention(n, begin, cuda::PrefillKernel::kAuto), stream) * kLayers;
    total_attention_flops += attention_flops(n, begin) * kLayers;
    other_ms += kLayers * time_ms(
                              [&](cudaStream_t s) {
                                cuda::add_rmsnorm(residual.as<float>(), ffn_out.as<bf16>(),
                                                  norm_weight.as<bf16>(), n, kModel, 1e-5f,
                                                  normed.as<bf16>(), s);
                                cuda::RopeArgs rope;
                                rope.qkv = qkv.as<bf16>();
                                rope.positions = d_positions.as<int32_t>();
                                rope.inv_freq = inv_freq.as<float>();
                                rope.n = n;
                                rope.n_query_heads = kHeadsQ;
                                rope.n_kv_heads = kHeadsKv;
                                rope.head_dim = kHeadDim;
                                cuda::apply_rope(rope, s);
                                cuda::append_kv(qkv.as<bf16>(), n, n, kHeadsQ, kHeadsKv, kHeadDim,
                                                d_offsets.as<int64_t>(), d_lengths.as<int32_t>(),
                                                k_cache.as<bf16>(), v_cache.as<bf16>(), s);
                                cuda::add_rmsnorm(residual.as<float>(), ffn_out.as<bf16>(),
                                                  norm_weight.as<bf16>(), n, kModel, 1e-5f,
                                                  normed.as<bf16>(), s);
                                cuda::swiglu(gate_up.as<bf16>(), n, kFfn, act.as<bf16>(), s);
                              },
                              stream);
  }
  const double total = gemm_ms + attention_ms + other_ms;
  std::printf("prefill of %d tokens, sum of kernels: %.1f ms\n", context, total);
  std::printf("  GEMMs      %8.1f ms (%4.1f%%)  %6.1f TFLOP/s\n", gemm_ms, 100 * gemm_ms / total,
              gemm_flops / gemm_ms / 1e9);
  std::printf("  attention  %8.1f ms (%4.1f%%)  %6.1f TFLOP/s (%s kernel)\n", attention_ms,
              100 * attention_ms / total, total_attention_flops / attention_ms / 1e9,
              have_wgmma ? "wgmma" : "mma.sync");
  std::printf("  other      %8.1f ms (%4.1f%%)  rmsnorm x2, rope, append_kv, swiglu\n", other_ms,
              100 * other_ms / total);
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace kvb

int main(int argc, char** argv) {
  const int context = argc > 1 ? std::atoi(argv[1]) : 32768;
  const int chunk = argc > 2 ? std::atoi(argv[2]) : 16384;
  return kvb::run(context, chunk);
}
