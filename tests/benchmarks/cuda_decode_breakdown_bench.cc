// Where a bf16 decode step's time goes: every kernel of the CUDA engine's decode step at
// Llama-3.1-8B shapes, each captured in a CUDA graph over 32 layers' own weights (so weights
// stream from HBM as in the engine, not from L2), timed per launch and set against the bytes it
// must read and the device's read bandwidth measured in the same run. The last rows time the whole
// step (all kernels of all layers in one graph) against the sum of its parts: the difference is
// what sits between kernels. `batch` rows of `context` keys each: up to kDecodeGemvMaxRows rows
// the engine folds its norms into the GEMVs; beyond, it runs the norm kernels and cuBLAS
// (CudaEngine::Impl::run_layers), and so does this breakdown — a sweep's cells decoded together
// take that path. Run on the GPU machine: ./cuda_decode_breakdown_bench [context] [batch]
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
constexpr int kFfn = 14336, kVocab = 128256;
constexpr int kQkvWidth = (kHeadsQ + 2 * kHeadsKv) * kHeadDim;

struct LayerBuffers {
  cuda::DeviceBuffer norm1, wqkv, wo, norm2, w_gate_up, w_down, k_cache, v_cache;
};

struct Step {
  std::string name;
  double bytes_per_launch;  // what the kernel must read (weights, cache) — its floor
  std::function<void(int layer, cudaStream_t)> launch;
};

int run(int context, int batch) {
  if (!cuda::device_available()) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  const double bandwidth_gbs = cuda::measure_read_bandwidth_gbs(size_t(4) << 30, 10);
  cublasHandle_t cublas;
  cublasCreate(&cublas);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cublasSetStream(cublas, stream);

  const int capacity = context + 256;  // room for the appends of every replay
  const int rows = batch;
  const int kv_rows = rows * kHeadsKv;  // one cache row per (sequence, KV head)
  std::vector<LayerBuffers> layers(kLayers);
  uint64_t seed = 1;
  auto random_bf16 = [&](size_t count, const char* label) {
    cuda::DeviceBuffer b(count * 2, label);
    cuda::fill_random_bf16(b.as<bf16>(), count, seed++, 0.02f, stream);
    return b;
  };
  for (LayerBuffers& l : layers) {
    l.norm1 = random_bf16(kModel, "norm");
    l.norm2 = random_bf16(kModel, "norm");
    l.wqkv = random_bf16(size_t(kQkvWidth) * kModel, "wqkv");
    l.wo = random_bf16(size_t(kModel) * kModel, "wo");
    l.w_gate_up = random_bf16(size_t(2) * kFfn * kModel, "gate/up");
    l.w_down = random_bf16(size_t(kModel) * kFfn, "down");
    l.k_cache = random_bf16(size_t(kv_rows) * capacity * kHeadDim, "k");
    l.v_cache = random_bf16(size_t(kv_rows) * capacity * kHeadDim, "v");
  }
  cuda::DeviceBuffer lm_head = random_bf16(size_t(kVocab) * kModel, "lm head");
  cuda::DeviceBuffer output_norm = random_bf16(kModel, "output norm");
  cuda::DeviceBuffer residual(size_t(rows) * kModel * 4),
      normed = random_bf16(size_t(rows) * kModel, "x"),
      qkv = random_bf16(size_t(rows) * kQkvWidth, "qkv"),
      attn = random_bf16(size_t(rows) * kHeadsQ * kHeadDim, "attn"),
      delta = random_bf16(size_t(rows) * kModel, "delta"),
      gate_up = random_bf16(size_t(rows) * 2 * kFfn, "gate_up"),
      act = random_bf16(size_t(rows) * kFfn, "act"), logits(size_t(rows) * kVocab * 4),
      next(rows * 4), positions(rows * 4);
  cudaMemsetAsync(residual.data(), 0, residual.bytes(), stream);
  cudaMemsetAsync(positions.data(), 0, positions.bytes(), stream);
  std::vector<float> inv_freq(kHeadDim / 2);
  for (int i = 0; i < kHeadDim / 2; ++i) inv_freq[i] = std::pow(500000.f, -2.f * i / kHeadDim);
  cuda::DeviceBuffer inv_freq_dev(inv_freq.size() * 4);
  inv_freq_dev.upload(inv_freq.data(), inv_freq.size() * 4);
  std::vector<int64_t> offsets(kv_rows);
  for (int r = 0; r < kv_rows; ++r) offsets[r] = int64_t(r) * capacity;
  cuda::DeviceBuffer kv_offset(kv_rows * 8), kv_length(kv_rows * 4);
  kv_offset.upload(offsets.data(), offsets.size() * 8);
  std::vector<int32_t> lengths(kv_rows, context);
  kv_length.upload(lengths.data(), lengths.size() * 4);
  cuda::DeviceBuffer workspace(
      cuda::decode_attention_workspace_floats(rows, kHeadsQ, kHeadDim, capacity) * 4);

  cuda::DeviceBuffer argmax_keys(rows * 8);  // lm_head_argmax's keys: zero, left zero by each call
  cudaMemsetAsync(argmax_keys.data(), 0, argmax_keys.bytes(), stream);
  int attention_chunk = 0;  // 0: the kernel's own choice
  // The engine's dense path appends the step's token inside the attention kernel; the separate
  // forms are timed too. The appends use their own lengths (one set per layer), since every replay
  // advances them: capacity leaves room for the replays.
  std::vector<int32_t> append_lengths_host(size_t(kLayers) * kv_rows, context);
  cuda::DeviceBuffer append_lengths(append_lengths_host.size() * 4);
  append_lengths.upload(append_lengths_host.data(), append_lengths_host.size() * 4);
  auto attention_args = [&](int l) {
    cuda::DecodeAttentionArgs a;
    a.q = qkv.as<bf16>();
    a.q_seq_stride = kQkvWidth;
    a.k = layers[l].k_cache.as<bf16>();
    a.v = layers[l].v_cache.as<bf16>();
    a.kv_offset = kv_offset.as<int64_t>();
    a.kv_length = kv_length.as<int32_t>();
    a.max_kv_length = capacity;
    a.out = attn.as<bf16>();
    a.out_seq_stride = kHeadsQ * kHeadDim;
    a.batch = rows;
    a.n_query_heads = kHeadsQ;
    a.n_kv_heads = kHeadsKv;
    a.head_dim = kHeadDim;
    a.scale = 1.f / std::sqrt(float(kHeadDim));
    a.workspace = workspace.as<float>();
    a.chunk_size = attention_chunk;
    return a;
  };
  auto attention = [&](int l, cudaStream_t s) { cuda::decode_attention(attention_args(l), s); };
  auto attention_appending = [&](int l, cudaStream_t s) {
    cuda::DecodeAttentionArgs a = attention_args(l);
    a.kv_length = append_lengths.as<int32_t>() + l * kv_rows;
    a.append.positions = positions.as<int32_t>();
    a.append.inv_freq = inv_freq_dev.as<float>();
    a.append.k_cache = layers[l].k_cache.as<bf16>();
    a.append.v_cache = layers[l].v_cache.as<bf16>();
    a.append.kv_length = append_lengths.as<int32_t>() + l * kv_rows;
    cuda::decode_attention(a, s);
  };
  auto rope_append = [&](int l, cudaStream_t s) {
    cuda::RopeArgs r;
    r.qkv = qkv.as<bf16>();
    r.positions = positions.as<int32_t>();
    r.inv_freq = inv_freq_dev.as<float>();
    r.n = rows;
    r.n_query_heads = kHeadsQ;
    r.n_kv_heads = kHeadsKv;
    r.head_dim = kHeadDim;
    cuda::rope_append_kv_decode(r, kv_offset.as<int64_t>(),
                                append_lengths.as<int32_t>() + l * kv_rows,
                                layers[l].k_cache.as<bf16>(), layers[l].v_cache.as<bf16>(), s);
  };
  const double kv_bytes = 2.0 * kv_rows * context * kHeadDim * 2;
  // The engine's step: the norms folded into the products around them (cuda::FoldedNorm), slot 0
  // before the attention and the LM head, slot 1 before the MLP.
  cuda::DeviceBuffer norm_sums(cuda::kFoldedNormSumsDoubles * sizeof(double));
  cudaMemsetAsync(norm_sums.data(), 0, norm_sums.bytes(), stream);
  auto folded = [&](const cuda::DeviceBuffer& gain, int slot) {
    return cuda::folded_norm(normed.as<bf16>(), norm_sums.as<double>(), slot, gain.as<bf16>(),
                             1e-5f);
  };
  const bool folded_norms = cuda::norms_fold(rows, {kModel, kHeadsQ * kHeadDim, kFfn});
  auto add_rmsnorm = [&](const cuda::DeviceBuffer& gain) {
    const cuda::DeviceBuffer* weight = &gain;
    return [&, weight](int, cudaStream_t s) {
      cuda::add_rmsnorm(residual.as<float>(), delta.as<bf16>(), weight->as<bf16>(), rows, kModel,
                        1e-5f, normed.as<bf16>(), s);
    };
  };
  const double qkv_bytes = 2.0 * kQkvWidth * kModel, o_bytes = 2.0 * kModel * kModel;
  const double gate_up_bytes = 2.0 * 2 * kFfn * kModel, down_bytes = 2.0 * kModel * kFfn;
  // The plain products (cuda::matmul: the GEMV up to kDecodeGemvMaxRows rows, cuBLAS beyond).
  auto qkv_product = [&](int l, cudaStream_t s) {
    cuda::matmul(cublas, normed.as<bf16>(), layers[l].wqkv.as<bf16>(), qkv.as<bf16>(), rows, kModel,
                 kQkvWidth, s);
  };
  auto o_product = [&](int l, cudaStream_t s) {
    cuda::matmul(cublas, attn.as<bf16>(), layers[l].wo.as<bf16>(), delta.as<bf16>(), rows, kModel,
                 kModel, s);
  };
  auto down_product = [&](int l, cudaStream_t s) {
    cuda::matmul(cublas, act.as<bf16>(), layers[l].w_down.as<bf16>(), delta.as<bf16>(), rows, kFfn,
                 kModel, s);
  };
  std::vector<Step> steps;
  if (folded_norms) {
    steps = {
        {"gemv qkv (folded norm)", qkv_bytes,
         [&](int l, cudaStream_t s) {
           cuda::matmul(folded(layers[l].norm1, 0), layers[l].wqkv.as<bf16>(), qkv.as<bf16>(), rows,
                        kModel, kQkvWidth, s);
         }},
        {"attention + append", kv_bytes, attention_appending},
        {"gemv o + residual", o_bytes,
         [&](int l, cudaStream_t s) {
           cuda::matmul_into_residual(attn.as<bf16>(), layers[l].wo.as<bf16>(),
                                      residual.as<float>(), rows, kModel, kModel,
                                      folded(layers[l].norm2, 1), s);
         }},
        {"gate_up + swiglu (folded)", gate_up_bytes,
         [&](int l, cudaStream_t s) {
           cuda::gate_up_swiglu(folded(layers[l].norm2, 1), layers[l].w_gate_up.as<bf16>(),
                                act.as<bf16>(), rows, kModel, kFfn, s);
         }},
        {"gemv down + residual", down_bytes,
         [&](int l, cudaStream_t s) {
           cuda::matmul_into_residual(act.as<bf16>(), layers[l].w_down.as<bf16>(),
                                      residual.as<float>(), rows, kFfn, kModel,
                                      folded(layers[(l + 1) % kLayers].norm1, 0), s);
         }},
    };
  } else {  // the engine's step beyond kDecodeGemvMaxRows rows: norm kernels and cuBLAS
    steps = {
        {"add_rmsnorm (attention)", 0,
         [&](int l, cudaStream_t s) { add_rmsnorm(layers[l].norm1)(l, s); }},
        {"gemm qkv", qkv_bytes, qkv_product},
        {"attention + append", kv_bytes, attention_appending},
        {"gemm o", o_bytes, o_product},
        {"add_rmsnorm (mlp)", 0,
         [&](int l, cudaStream_t s) { add_rmsnorm(layers[l].norm2)(l, s); }},
        {"gemm gate_up + swiglu", gate_up_bytes,
         [&](int l, cudaStream_t s) {
           cuda::gate_up_swiglu(cublas, normed.as<bf16>(), layers[l].w_gate_up.as<bf16>(),
                                gate_up.as<bf16>(), act.as<bf16>(), rows, kModel, kFfn, s);
         }},
        {"gemm down", down_bytes, down_product},
    };
  }
  std::printf(
      "Llama-3.1-8B shapes, batch %d, context %d, norms %s; measured read bandwidth %.0f GB/s\n",
      rows, context, folded_norms ? "folded" : "as kernels", bandwidth_gbs);
  std::printf("%-24s %10s %10s %10s %8s\n", "kernel", "us/layer", "floor us", "GB/s", "ratio");
  auto report = [&](const Step& step) {  // prints the step's line; returns its µs and floor µs
    const double us = bench::graph_median_us(step.launch, kLayers, stream);
    const double floor_us = step.bytes_per_launch / (bandwidth_gbs * 1e3);
    std::printf("%-24s %10.2f %10.2f %10.0f %8s\n", step.name.c_str(), us, floor_us,
                step.bytes_per_launch > 0 ? step.bytes_per_launch / (us * 1e3) : 0.0,
                floor_us > 0 ? std::to_string(us / floor_us).substr(0, 5).c_str() : "-");
    return std::pair(us, floor_us);
  };
  double sum_us = 0, floor_sum_us = 0;
  for (const Step& step : steps) {
    const auto [us, floor_us] = report(step);
    sum_us += us;
    floor_sum_us += floor_us;
  }
  // Other forms, for comparison (not part of the whole step): the append then the attention, the
  // gate/up product then SwiGLU as two kernels; with folded norms also the norm kernel and the
  // plain products; beyond the GEMV's rows the tensor-core kernel the engine leaves opt-in.
  std::vector<Step> others = {
      {"(rope + append_kv)", 0, rope_append},
      {"(decode_attention)", kv_bytes, attention},
      {"(gemm gate_up)", gate_up_bytes,
       [&](int l, cudaStream_t s) {
         cuda::matmul(cublas, normed.as<bf16>(), layers[l].w_gate_up.as<bf16>(), gate_up.as<bf16>(),
                      rows, kModel, 2 * kFfn, s);
       }},
      {"(swiglu)", 0,
       [&](int, cudaStream_t s) {
         cuda::swiglu(gate_up.as<bf16>(), rows, kFfn, act.as<bf16>(), s);
       }},
  };
  if (folded_norms) {
    others.insert(others.begin(), {{"(add_rmsnorm)", 0, add_rmsnorm(layers[0].norm1)},
                                   {"(gemv qkv)", qkv_bytes, qkv_product},
                                   {"(gemv o)", o_bytes, o_product},
                                   {"(gemv down)", down_bytes, down_product}});
  }
  cuda::DeviceBuffer mma_out;
  if (rows > cuda::kDecodeGemvMaxRows && rows <= cuda::kSkinnyMaxRows) {
    mma_out = cuda::DeviceBuffer(size_t(rows) * 2 * kFfn * 4, "tensor-core output");
    auto mma = [&](const char* name, double bytes, cuda::DeviceBuffer LayerBuffers::*weight,
                   const cuda::DeviceBuffer& x, int in, int out) {
      const cuda::DeviceBuffer* input = &x;
      others.push_back({name, bytes, [&, input, weight, in, out](int l, cudaStream_t s) {
                          cuda::matmul_skinny_mma(input->as<bf16>(), (layers[l].*weight).as<bf16>(),
                                                  mma_out.as<float>(), rows, in, out, s);
                        }});
    };
    mma("(tensor-core qkv)", qkv_bytes, &LayerBuffers::wqkv, normed, kModel, kQkvWidth);
    mma("(tensor-core o)", o_bytes, &LayerBuffers::wo, attn, kModel, kModel);
    mma("(tensor-core gate_up)", gate_up_bytes, &LayerBuffers::w_gate_up, normed, kModel, 2 * kFfn);
    mma("(tensor-core down)", down_bytes, &LayerBuffers::w_down, act, kFfn, kModel);
  }
  for (const Step& step : others) report(step);
  const auto add_output_norm = add_rmsnorm(output_norm);
  if (folded_norms) {
    auto head_unfused = [&](int, cudaStream_t s) {
      cuda::matmul_f32out(cublas, normed.as<bf16>(), lm_head.as<bf16>(), logits.as<float>(), rows,
                          kModel, kVocab, s);
      cuda::argmax_rows(logits.as<float>(), rows, kVocab, next.as<int32_t>(), s);
    };
    std::printf("%-24s %10.2f\n", "(lm head, argmax)",
                bench::graph_median_us(head_unfused, 1, stream));
  }
  auto head = [&](int l, cudaStream_t s) {
    if (folded_norms) {
      cuda::lm_head_argmax(folded(output_norm, 0), lm_head.as<bf16>(), logits.as<float>(), rows,
                           kModel, kVocab, argmax_keys.as<unsigned long long>(), next.as<int32_t>(),
                           s);
    } else {
      add_output_norm(l, s);
      cuda::lm_head_argmax(cublas, normed.as<bf16>(), lm_head.as<bf16>(), logits.as<float>(), rows,
                           kModel, kVocab, argmax_keys.as<unsigned long long>(), next.as<int32_t>(),
                           s);
    }
  };
  const double head_us = bench::graph_median_us(head, 1, stream);
  const double head_floor_us = 2.0 * kVocab * kModel / (bandwidth_gbs * 1e3);
  std::printf("%-24s %10.2f %10.2f %10s %8.3f\n",
              folded_norms ? "lm head + argmax" : "norm, lm head, argmax", head_us, head_floor_us,
              "", head_us / head_floor_us);
  auto whole = [&](int l, cudaStream_t s) {
    for (const Step& step : steps) step.launch(l, s);
    if (l == kLayers - 1) head(l, s);
  };
  const double step_us = bench::graph_median_us(whole, kLayers, stream) * kLayers;
  const double parts_us = sum_us * kLayers + head_us;
  const double floor_us = floor_sum_us * kLayers + head_floor_us;
  std::printf("sum of parts: %.0f us; whole step in one graph: %.0f us; bandwidth floor %.0f us\n",
              parts_us, step_us, floor_us);
  std::printf("whole step / floor = %.3f; gaps between kernels = %.0f us (%.2f us per launch)\n",
              step_us / floor_us, step_us - parts_us,
              (step_us - parts_us) / (steps.size() * kLayers));
  // Split size of the decode attention: the automatic choice against fixed ones.
  std::printf("decode_attention by split size (us/layer, floor %.2f us):",
              kv_bytes / (bandwidth_gbs * 1e3));
  for (int chunk : {64, 128, 256, 512, 1024, 2048, 4096}) {
    if (chunk > capacity) break;
    attention_chunk = chunk;
    std::printf(" %d:%.2f", chunk, bench::graph_median_us(attention, kLayers, stream));
  }
  std::printf("\n");
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace kvb

int main(int argc, char** argv) {
  const int context = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int batch = argc > 2 ? std::atoi(argv[2]) : 1;
  if (context < 1 || batch < 1) {
    std::fprintf(stderr, "usage: %s [context >= 1, default 4096] [batch >= 1, default 1]\n",
                 argv[0]);
    return 2;
  }
  return kvb::run(context, batch);
}
