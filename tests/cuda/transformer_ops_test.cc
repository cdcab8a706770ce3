// The forward pass's other CUDA kernels (kernels/cuda/transformer_ops.h): the KV append, row copies
// and argmax, the bf16 GEMM/GEMV's fusions (gate/up with SwiGLU, the LM head with its argmax, the
// folded norms) and the decode step's fused RoPE + append. RMSNorm, RoPE, SwiGLU and the GEMM
// itself against their CPU twins: tests/cuda/backend_ops_test.cc.
#include "kernels/cuda/transformer_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

using test::random_bf16_values;

// Prefill rows land at each head's offset + length + row, K and V alike: head_dim 128 takes the
// 16-byte copies, head_dim 12 the one-value path.
TEST(CudaOps, AppendKvPlacesPrefillRowsInTheCache) {
  KVB_REQUIRE_GPU();
  for (int d : {128, 12}) {
    const int rows = 37, hq = 4, hkv = 2, capacity = 64, width = (hq + 2 * hkv) * d;
    const std::vector<int64_t> offsets = {capacity, 0};
    const std::vector<int32_t> lengths = {3, 20};
    auto qkv = random_bf16_values(size_t(rows) * width, 40);
    std::vector<float> want_k(size_t(2) * capacity * d, 0.f), want_v = want_k;
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < hkv; ++h)
        for (int j = 0; j < d; ++j) {
          const size_t slot = size_t(offsets[h] + lengths[h] + r) * d + j;
          want_k[slot] = qkv[size_t(r) * width + (hq + h) * d + j];
          want_v[slot] = qkv[size_t(r) * width + (hq + hkv + h) * d + j];
        }
    auto d_qkv = test::to_device_bf16(qkv);
    auto d_offsets = test::to_device(offsets);
    auto d_lengths = test::to_device(lengths);
    cuda::DeviceBuffer d_k(want_k.size() * 2), d_v(want_v.size() * 2);
    cudaMemset(d_k.data(), 0, d_k.bytes());
    cudaMemset(d_v.data(), 0, d_v.bytes());
    cuda::append_kv(d_qkv.as<__nv_bfloat16>(), rows, rows, hq, hkv, d, d_offsets.as<int64_t>(),
                    d_lengths.as<int32_t>(), d_k.as<__nv_bfloat16>(), d_v.as<__nv_bfloat16>(),
                    nullptr);
    EXPECT_EQ(test::from_device_bf16(d_k, want_k.size()), want_k) << "head_dim " << d;
    EXPECT_EQ(test::from_device_bf16(d_v, want_v.size()), want_v) << "head_dim " << d;
  }
}

TEST(CudaOps, CopyRowsAndArgmax) {
  KVB_REQUIRE_GPU();
  auto rows = random_bf16_values(10 * 64, 9);
  auto d_src = test::to_device_bf16(rows);
  cuda::DeviceBuffer d_dst(3 * 64 * 2);
  auto d_from = test::to_device(std::vector<int64_t>{7, 2, 9});
  auto d_to = test::to_device(std::vector<int64_t>{0, 1, 2});
  cuda::copy_rows(d_src.as<__nv_bfloat16>(), d_dst.as<__nv_bfloat16>(), d_from.as<int64_t>(),
                  d_to.as<int64_t>(), 3, 64, nullptr);
  auto got = test::from_device_bf16(d_dst, 3 * 64);
  EXPECT_EQ(got[0], rows[7 * 64]);
  EXPECT_EQ(got[64 + 5], rows[2 * 64 + 5]);
  EXPECT_EQ(got[128 + 63], rows[9 * 64 + 63]);

  std::vector<float> logits(2 * 1000, 0.f);
  logits[123] = 5.f;
  logits[1000 + 999] = 1.f;
  logits[1000 + 3] = 1.f;  // tie: lowest index wins
  auto d_logits = test::to_device(logits);
  cuda::DeviceBuffer d_next(8);
  cuda::argmax_rows(d_logits.as<float>(), 2, 1000, d_next.as<int32_t>(), nullptr);
  std::vector<int32_t> next(2);
  d_next.download(next.data(), 8);
  EXPECT_EQ(next[0], 123);
  EXPECT_EQ(next[1], 3);

  // A vocabulary-sized row (Llama 3: 128,256) with the maximum near the end.
  std::vector<float> big = random_bf16_values(128256, 10);
  big[128250] = 3.f;
  auto d_big = test::to_device(big);
  cuda::argmax_rows(d_big.as<float>(), 1, 128256, d_next.as<int32_t>(), nullptr);
  d_next.download(next.data(), 4);
  EXPECT_EQ(next[0], 128250);
}

// The fused gate/up GEMV + SwiGLU equals matmul then swiglu bit for bit (n <= 4: the same sums
// in the same order, the same roundings), and both match the CPU twins; n = 6 and 12 take the
// unfused path (the tensor-core product with bf16 output, then swiglu).
TEST(CudaOps, GateUpSwigluMatchesUnfusedAndCpu) {
  KVB_REQUIRE_GPU();
  cublasHandle_t handle;
  cublasCreate(&handle);
  for (auto [n, in, ffn] : std::vector<std::tuple<int, int, int>>{{1, 576, 1536},
                                                                  {2, 576, 1536},
                                                                  {4, 4096, 1000},
                                                                  {1, 4096, 14336},
                                                                  {6, 576, 1536},
                                                                  {12, 4096, 1000}}) {
    auto x = random_bf16_values(size_t(n) * in, 21, 2.0f);
    auto w = random_bf16_values(size_t(2) * ffn * in, 22, 0.1f);
    std::vector<float> product(size_t(n) * 2 * ffn), expected(size_t(n) * ffn);
    kernels::matmul(x.data(), n, in, w.data(), 2 * ffn, nullptr, product.data());
    for (float& value : product) value = test::round_bf16(value);
    for (int r = 0; r < n; ++r)
      kernels::swiglu(product.data() + size_t(r) * 2 * ffn,
                      product.data() + size_t(r) * 2 * ffn + ffn, ffn,
                      expected.data() + size_t(r) * ffn);
    auto d_x = test::to_device_bf16(x), d_w = test::to_device_bf16(w);
    cuda::DeviceBuffer d_gate_up(size_t(n) * 2 * ffn * 2), d_fused(size_t(n) * ffn * 2),
        d_unfused(size_t(n) * ffn * 2);
    cuda::gate_up_swiglu(handle, d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
                         d_gate_up.as<__nv_bfloat16>(), d_fused.as<__nv_bfloat16>(), n, in, ffn,
                         nullptr);
    cuda::matmul(handle, d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
                 d_gate_up.as<__nv_bfloat16>(), n, in, 2 * ffn, nullptr);
    cuda::swiglu(d_gate_up.as<__nv_bfloat16>(), n, ffn, d_unfused.as<__nv_bfloat16>(), nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    const auto fused = test::from_device_bf16(d_fused, expected.size());
    const auto unfused = test::from_device_bf16(d_unfused, expected.size());
    EXPECT_EQ(fused, unfused) << "n=" << n << " in=" << in << " ffn=" << ffn;
    // The GPU's f32 sums differ from the CPU's in order, so gate and up may round to a neighbouring
    // bf16 value: a few rounding steps of the product, relative to the operands' scale.
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, std::abs(fused[i] - expected[i]) / (std::abs(expected[i]) + 0.05));
    EXPECT_LT(worst, 0.05) << "n=" << n << " in=" << in << " ffn=" << ffn;
  }
  cublasDestroy(handle);
}

// The LM head with its argmax folded in: logits as matmul_f32out's, next = the argmax of those
// logits with the lowest index on ties (two identical weight rows), over two calls (the argmax
// keys must be left zero) and for n = 6 (the unfused fallback).
TEST(CudaOps, LmHeadArgmaxMatchesCpu) {
  KVB_REQUIRE_GPU();
  cublasHandle_t handle;
  cublasCreate(&handle);
  const int in = 576, vocab = 50001;
  auto w = random_bf16_values(size_t(vocab) * in, 31, 0.1f);
  std::copy(w.begin() + size_t(40000) * in, w.begin() + size_t(40001) * in,
            w.begin() + size_t(7) * in);
  auto d_w = test::to_device_bf16(w);
  cuda::DeviceBuffer keys(8 * 8), d_next(8 * 4);
  cuda::check(cudaMemset(keys.data(), 0, keys.bytes()), "memset");
  for (int n : {1, 3, 4, 6}) {
    for (int call = 0; call < 2; ++call) {
      auto x = random_bf16_values(size_t(n) * in, 32 + call + 10 * n, 1.0f);
      // Row 0 of x points along weight row 40000 (and its twin 7), so those two tie for the max.
      if (call == 1)
        for (int j = 0; j < in; ++j) x[j] = w[size_t(40000) * in + j] * 20.f;
      x = [&] {
        std::vector<float> rounded(x.size());
        for (size_t i = 0; i < x.size(); ++i) rounded[i] = test::round_bf16(x[i]);
        return rounded;
      }();
      std::vector<float> expected(size_t(n) * vocab);
      kernels::matmul(x.data(), n, in, w.data(), vocab, nullptr, expected.data());
      auto d_x = test::to_device_bf16(x);
      cuda::DeviceBuffer d_logits(expected.size() * 4);
      cuda::lm_head_argmax(handle, d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
                           d_logits.as<float>(), n, in, vocab, keys.as<unsigned long long>(),
                           d_next.as<int32_t>(), nullptr);
      cuda::check(cudaDeviceSynchronize(), "sync");
      std::vector<float> logits(expected.size());
      d_logits.download(logits.data(), logits.size() * 4);
      EXPECT_LT(test::max_abs_diff(logits, expected), 1e-3) << "n=" << n;
      std::vector<int32_t> next(n);
      d_next.download(next.data(), n * 4);
      for (int r = 0; r < n; ++r) {
        const float* row = logits.data() + size_t(r) * vocab;
        const int32_t want = int32_t(std::max_element(row, row + vocab) - row);  // first maximum
        EXPECT_EQ(next[r], want) << "n=" << n << " call=" << call << " row=" << r;
      }
      if (call == 1) {
        EXPECT_EQ(next[0], 7) << "n=" << n;
      }
    }
  }
  std::vector<unsigned long long> left(8);
  keys.download(left.data(), left.size() * 8);
  for (unsigned long long k : left) EXPECT_EQ(k, 0ull);
  cublasDestroy(handle);
}

// The decode step's folded norms (cuda::FoldedNorm) over one layer's chain of products, against
// the CPU norm and products in f32: fold_rmsnorm starts it; a product after a norm scales its sums
// and zeroes the other slot; a product into the residual adds its bf16-rounded output (bit for bit
// the plain GEMV's) and folds the next norm in (scaled rows exact, Σv² in f64).
TEST(CudaOps, FoldedNormChainMatchesCpu) {
  KVB_REQUIRE_GPU();
  EXPECT_TRUE(cuda::norms_fold(4, {576, 1536}));
  EXPECT_FALSE(cuda::norms_fold(5, {576}));
  EXPECT_FALSE(cuda::norms_fold(1, {576, 1537}));
  cublasHandle_t handle;
  cublasCreate(&handle);
  cuda::DeviceBuffer keys(8 * 8), d_next(8 * 4);
  cuda::check(cudaMemset(keys.data(), 0, keys.bytes()), "memset");
  const int d = 576, hidden = 1536, out = 1000, vocab = 20001;
  for (int n : {1, 3, 4}) {
    const std::string where = "n=" + std::to_string(n);
    std::vector<float> residual = random_bf16_values(size_t(n) * d, 61, 3.0f);
    const auto gains = random_bf16_values(3 * d, 62);
    const auto x = random_bf16_values(size_t(n) * hidden, 63);
    const auto w_out = random_bf16_values(size_t(out) * d, 64, 0.1f);
    const auto w_in = random_bf16_values(size_t(d) * hidden, 65, 0.05f);
    const auto w_gate_up = random_bf16_values(size_t(2 * hidden) * d, 66, 0.1f);
    const auto w_head = random_bf16_values(size_t(vocab) * d, 67, 0.1f);
    auto d_residual = test::to_device(residual);
    auto d_gains = test::to_device_bf16(gains), d_x = test::to_device_bf16(x);
    auto d_w_out = test::to_device_bf16(w_out), d_w_in = test::to_device_bf16(w_in);
    auto d_w_gate_up = test::to_device_bf16(w_gate_up), d_w_head = test::to_device_bf16(w_head);
    cuda::DeviceBuffer d_scaled(size_t(n) * d * 2), d_y(size_t(n) * out * 2),
        d_plain(size_t(n) * d * 2), d_act(size_t(n) * hidden * 2), d_logits(size_t(n) * vocab * 4);
    auto d_sums =
        test::to_device(std::vector<double>(cuda::kFoldedNormSumsDoubles, 123.0));  // garbage
    auto slot_words = [&](int slot) {  // [line][row] for the rows in use
      std::vector<double> words(cuda::kFoldedNormSumsDoubles), slot_rows;
      d_sums.download(words.data(), words.size() * 8);
      for (int line = 0; line < cuda::kFoldedNormLines; ++line)
        for (int r = 0; r < n; ++r)
          slot_rows.push_back(
              words[slot * cuda::kFoldedNormSlotDoubles + cuda::folded_norm_word(line, r)]);
      return slot_rows;
    };
    auto slot_sums = [&](int slot) {  // the lines added in order, as the consumer does
      const std::vector<double> words = slot_words(slot);
      std::vector<double> sums(n, 0.0);
      for (int line = 0; line < cuda::kFoldedNormLines; ++line)
        for (int r = 0; r < n; ++r) sums[r] += words[size_t(line) * n + r];
      return sums;
    };
    auto folded = [&](int gain, int slot) {
      return cuda::folded_norm(d_scaled.as<__nv_bfloat16>(), d_sums.as<double>(), slot,
                               d_gains.as<__nv_bfloat16>() + gain * d, 1e-5f);
    };
    // The folded state must be exactly the rows and sums that the norm with `gain` describes.
    auto expect_folded = [&](int gain, int slot, const char* step) {
      cuda::check(cudaDeviceSynchronize(), "sync");
      const auto scaled = test::from_device_bf16(d_scaled, residual.size());
      const std::vector<double> sums = slot_sums(slot);
      for (int r = 0; r < n; ++r) {
        double want = 0;
        for (int j = 0; j < d; ++j) {
          const float v = residual[size_t(r) * d + j];
          want += double(v) * v;
          ASSERT_EQ(scaled[size_t(r) * d + j], test::round_bf16(v * gains[gain * d + j]))
              << where << " " << step << " row " << r << " col " << j;
        }
        EXPECT_NEAR(sums[r], want, 1e-5 * want) << where << " " << step;
      }
    };
    auto expect_slot_zeroed = [&](int slot, const char* step) {
      for (double word : slot_words(slot)) EXPECT_EQ(word, 0.0) << where << " " << step;
    };
    auto normed_cpu = [&](int gain) {
      std::vector<float> normed(residual.size());
      kernels::rmsnorm(residual.data(), gains.data() + gain * d, n, d, 1e-5f, normed.data());
      return normed;
    };
    // bf16 outputs, inputs rounded to bf16 before the norm's scale, and (gate/up) bf16 products
    // through SwiGLU: a few rounding steps relative to the operands' scale.
    auto expect_near = [&](const std::vector<float>& got, const std::vector<float>& want,
                           const char* step) {
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::abs(got[i] - want[i]) / (std::abs(want[i]) + 0.1));
      EXPECT_LT(worst, 0.05) << where << " " << step;
    };
    auto add_into_residual = [&](int gain, int slot, const char* step) {
      cuda::matmul(handle, d_x.as<__nv_bfloat16>(), d_w_in.as<__nv_bfloat16>(),
                   d_plain.as<__nv_bfloat16>(), n, hidden, d, nullptr);
      cuda::matmul_into_residual(d_x.as<__nv_bfloat16>(), d_w_in.as<__nv_bfloat16>(),
                                 d_residual.as<float>(), n, hidden, d, folded(gain, slot), nullptr);
      cuda::check(cudaDeviceSynchronize(), "sync");
      const auto plain = test::from_device_bf16(d_plain, residual.size());
      for (size_t i = 0; i < residual.size(); ++i) residual[i] += plain[i];
      std::vector<float> got(residual.size());
      d_residual.download(got.data(), got.size() * 4);
      EXPECT_EQ(got, residual) << where << " " << step;
      expect_folded(gain, slot, step);
    };

    cuda::fold_rmsnorm(d_residual.as<float>(), n, d, folded(0, 0), nullptr);
    expect_folded(0, 0, "fold_rmsnorm");
    cuda::matmul(folded(0, 0), d_w_out.as<__nv_bfloat16>(), d_y.as<__nv_bfloat16>(), n, d, out,
                 nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    expect_slot_zeroed(1, "gemm");
    std::vector<float> want(size_t(n) * out);
    kernels::matmul(normed_cpu(0).data(), n, d, w_out.data(), out, nullptr, want.data());
    expect_near(test::from_device_bf16(d_y, want.size()), want, "gemm");

    add_into_residual(1, 1, "o");
    cuda::gate_up_swiglu(folded(1, 1), d_w_gate_up.as<__nv_bfloat16>(), d_act.as<__nv_bfloat16>(),
                         n, d, hidden, nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    expect_slot_zeroed(0, "gate_up");
    std::vector<float> gate_up(size_t(n) * 2 * hidden), act(size_t(n) * hidden);
    kernels::matmul(normed_cpu(1).data(), n, d, w_gate_up.data(), 2 * hidden, nullptr,
                    gate_up.data());
    for (float& value : gate_up) value = test::round_bf16(value);
    for (int r = 0; r < n; ++r)
      kernels::swiglu(gate_up.data() + size_t(r) * 2 * hidden,
                      gate_up.data() + size_t(r) * 2 * hidden + hidden, hidden,
                      act.data() + size_t(r) * hidden);
    expect_near(test::from_device_bf16(d_act, act.size()), act, "gate_up_swiglu");

    add_into_residual(2, 0, "down");
    cuda::lm_head_argmax(folded(2, 0), d_w_head.as<__nv_bfloat16>(), d_logits.as<float>(), n, d,
                         vocab, keys.as<unsigned long long>(), d_next.as<int32_t>(), nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    std::vector<float> logits(size_t(n) * vocab), want_logits(logits.size());
    d_logits.download(logits.data(), logits.size() * 4);
    kernels::matmul(normed_cpu(2).data(), n, d, w_head.data(), vocab, nullptr, want_logits.data());
    expect_near(logits, want_logits, "lm head");
    std::vector<int32_t> next(n);
    d_next.download(next.data(), n * 4);
    for (int r = 0; r < n; ++r) {
      const float* row = logits.data() + size_t(r) * vocab;
      EXPECT_EQ(next[r], int32_t(std::max_element(row, row + vocab) - row)) << where;
    }
  }
  // Rows past the GEMV's are refused with a message, not computed wrong.
  cuda::FoldedNorm norm;
  EXPECT_THROW(cuda::matmul(norm, nullptr, nullptr, 5, 576, 576, nullptr), std::invalid_argument);
  cublasDestroy(handle);
}

// The decode step's fused bias + RoPE + append + advance equals apply_rope then append_kv then
// advance_lengths, bit for bit; chained in a captured graph (overlapped launches), each step sees
// the lengths the previous one advanced.
TEST(CudaOps, FusedRopeAppendDecodeInAGraph) {
  KVB_REQUIRE_GPU();
  const int batch = 2, hq = 4, hkv = 2, d = 64, capacity = 8, steps = 3;
  const int width = (hq + 2 * hkv) * d;
  std::vector<int64_t> offsets(batch * hkv);
  for (int i = 0; i < batch * hkv; ++i) offsets[i] = int64_t(i) * capacity;
  const std::vector<int32_t> lengths = {1, 1, 4, 4};
  auto d_inv_freq = test::to_device(kernels::rope_inverse_frequencies(d, 10000.f));
  auto d_positions = test::to_device(std::vector<int32_t>{5, 9});
  auto d_bias = test::to_device_bf16(random_bf16_values(width, 30, 0.1f));
  auto d_offsets = test::to_device(offsets);
  std::vector<std::vector<float>> rows;
  for (int s = 0; s < steps; ++s) rows.push_back(random_bf16_values(size_t(batch) * width, 20 + s));

  struct Run {
    cuda::DeviceBuffer lengths, k, v;
    std::vector<cuda::DeviceBuffer> qkv;
  };
  auto make_run = [&] {
    Run r{test::to_device(lengths),
          cuda::DeviceBuffer(size_t(batch) * hkv * capacity * d * 2),
          cuda::DeviceBuffer(size_t(batch) * hkv * capacity * d * 2),
          {}};
    cudaMemset(r.k.data(), 0, r.k.bytes());
    cudaMemset(r.v.data(), 0, r.v.bytes());
    for (const auto& row : rows) r.qkv.push_back(test::to_device_bf16(row));
    return r;
  };
  auto rope_for = [&](Run& r, int s) {
    cuda::RopeArgs rope;
    rope.qkv = r.qkv[s].as<__nv_bfloat16>();
    rope.bias = d_bias.as<__nv_bfloat16>();
    rope.positions = d_positions.as<int32_t>();
    rope.inv_freq = d_inv_freq.as<float>();
    rope.n = batch;
    rope.n_query_heads = hq;
    rope.n_kv_heads = hkv;
    rope.head_dim = d;
    return rope;
  };
  Run fused = make_run(), separate = make_run();
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  for (int s = 0; s < steps; ++s)
    cuda::rope_append_kv_decode(rope_for(fused, s), d_offsets.as<int64_t>(),
                                fused.lengths.as<int32_t>(), fused.k.as<__nv_bfloat16>(),
                                fused.v.as<__nv_bfloat16>(), stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  for (int s = 0; s < steps; ++s) {
    cuda::apply_rope(rope_for(separate, s), stream);
    cuda::append_kv(separate.qkv[s].as<__nv_bfloat16>(), batch, 1, hq, hkv, d,
                    d_offsets.as<int64_t>(), separate.lengths.as<int32_t>(),
                    separate.k.as<__nv_bfloat16>(), separate.v.as<__nv_bfloat16>(), stream);
    cuda::advance_lengths(separate.lengths.as<int32_t>(), batch * hkv, nullptr, 0, 1, stream);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<int32_t> got_lengths(lengths.size()), want_lengths(lengths.size());
  fused.lengths.download(got_lengths.data(), got_lengths.size() * 4);
  separate.lengths.download(want_lengths.data(), want_lengths.size() * 4);
  EXPECT_EQ(got_lengths, (std::vector<int32_t>{4, 4, 7, 7}));
  EXPECT_EQ(got_lengths, want_lengths);
  const size_t cache = size_t(batch) * hkv * capacity * d;
  EXPECT_EQ(test::from_device_bf16(fused.k, cache), test::from_device_bf16(separate.k, cache));
  EXPECT_EQ(test::from_device_bf16(fused.v, cache), test::from_device_bf16(separate.v, cache));
  for (int s = 0; s < steps; ++s)  // the rotated queries too
    EXPECT_EQ(test::from_device_bf16(fused.qkv[s], size_t(batch) * width),
              test::from_device_bf16(separate.qkv[s], size_t(batch) * width));
  // Slots written: step s of sequence b, head h lands at its starting length + s.
  auto k = test::from_device_bf16(fused.k, cache);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h)
      EXPECT_NE(k[(offsets[b * hkv + h] + lengths[b * hkv + h] + steps - 1) * d + 3], 0.f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvb
