// Element-wise CUDA kernels against their CPU twins: RMSNorm (with the residual add), RoPE (both
// pairings, llama3-scaled frequencies, QKV bias), SwiGLU, and the bf16 GEMM against kernels::matmul.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

using test::random_bf16_values;

TEST(CudaOps, AddRmsNormMatchesCpu) {
  KVB_REQUIRE_GPU();
  const int rows = 5, dim = 576;
  auto residual = random_bf16_values(rows * dim, 1, 3.0f);
  auto delta = random_bf16_values(rows * dim, 2);
  auto weight = random_bf16_values(dim, 3);
  std::vector<float> summed(rows * dim), expected(rows * dim);
  for (size_t i = 0; i < summed.size(); ++i) summed[i] = residual[i] + delta[i];
  kernels::rmsnorm(summed.data(), weight.data(), rows, dim, 1e-5f, expected.data());

  auto d_res = test::to_device(residual);
  auto d_delta = test::to_device_bf16(delta), d_weight = test::to_device_bf16(weight);
  cuda::DeviceBuffer d_out(rows * dim * 2);
  cuda::add_rmsnorm(d_res.as<float>(), d_delta.as<__nv_bfloat16>(), d_weight.as<__nv_bfloat16>(), rows,
                    dim, 1e-5f, d_out.as<__nv_bfloat16>(), nullptr);
  auto got = test::from_device_bf16(d_out, rows * dim);
  std::vector<float> got_residual(rows * dim);
  d_res.download(got_residual.data(), got_residual.size() * 4);
  EXPECT_LT(test::max_abs_diff(got_residual, summed), 1e-5);
  EXPECT_LT(test::max_abs_diff(got, expected), 3e-2);
}

class CudaRopeTest : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(CudaRopeTest, MatchesCpu) {
  KVB_REQUIRE_GPU();
  const auto [interleaved, llama3, bias] = GetParam();
  const int rows = 7, hq = 4, hkv = 2, d = 128, width = (hq + 2 * hkv) * d;
  auto qkv = random_bf16_values(rows * width, 4);
  auto bias_values = random_bf16_values(width, 5);
  const auto freq = llama3 ? kernels::rope_inverse_frequencies_llama3(d, 500000.f, {})
                           : kernels::rope_inverse_frequencies(d, 10000.f);
  const auto pairing = interleaved ? kernels::RopePairing::kInterleavedPairs : kernels::RopePairing::kHalves;
  std::vector<int32_t> positions = {0, 1, 5, 100, 4095, 30000, 131000};
  std::vector<float> expected = qkv;
  for (int r = 0; r < rows; ++r) {
    float* row = expected.data() + size_t(r) * width;
    if (bias)
      for (int j = 0; j < width; ++j) row[j] = test::round_bf16(row[j] + bias_values[j]);
    kernels::apply_rope(row, hq + hkv, d, d, positions[r], freq.data(), pairing);
  }
  auto d_qkv = test::to_device_bf16(qkv);
  auto d_bias = test::to_device_bf16(bias_values);
  auto d_pos = test::to_device(positions);
  auto d_freq = test::to_device(freq);
  cuda::RopeArgs args;
  args.qkv = d_qkv.as<__nv_bfloat16>();
  args.bias = bias ? d_bias.as<__nv_bfloat16>() : nullptr;
  args.positions = d_pos.as<int32_t>();
  args.inv_freq = d_freq.as<float>();
  args.n = rows;
  args.n_query_heads = hq;
  args.n_kv_heads = hkv;
  args.head_dim = d;
  args.interleaved = interleaved;
  cuda::bias_rope(args, nullptr);
  auto got = test::from_device_bf16(d_qkv, qkv.size());
  // V heads are untouched; Q/K within bf16 rounding of the rotated values.
  EXPECT_LT(test::max_abs_diff(got, expected), 1.6e-2);
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaRopeTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool()));

TEST(CudaOps, SwigluMatchesCpu) {
  KVB_REQUIRE_GPU();
  const int rows = 3, ffn = 1536;
  auto gate_up = random_bf16_values(rows * 2 * ffn, 6, 4.0f);
  std::vector<float> expected(rows * ffn);
  for (int r = 0; r < rows; ++r)
    kernels::swiglu(gate_up.data() + size_t(r) * 2 * ffn, gate_up.data() + size_t(r) * 2 * ffn + ffn, ffn,
                    expected.data() + size_t(r) * ffn);
  auto d_in = test::to_device_bf16(gate_up);
  cuda::DeviceBuffer d_out(rows * ffn * 2);
  cuda::swiglu(d_in.as<__nv_bfloat16>(), rows, ffn, d_out.as<__nv_bfloat16>(), nullptr);
  // bf16 output: within one rounding step (2^-8 relative) of the f32 value.
  const auto got = test::from_device_bf16(d_out, rows * ffn);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], std::abs(expected[i]) / 128 + 1e-3) << "element " << i;
}

TEST(CudaOps, GemmMatchesCpuMatmul) {
  KVB_REQUIRE_GPU();
  for (int n : {1, 3, 4, 17, 256}) {  // n <= 4 takes the GEMV kernel
    const int in = 576, out = 1536;
    auto x = random_bf16_values(size_t(n) * in, 7);
    auto w = random_bf16_values(size_t(out) * in, 8, 0.1f);
    std::vector<float> expected(size_t(n) * out);
    kernels::matmul(x.data(), n, in, w.data(), out, nullptr, expected.data());
    auto d_x = test::to_device_bf16(x), d_w = test::to_device_bf16(w);
    cuda::DeviceBuffer d_y(expected.size() * 4);
    cublasHandle_t handle;
    cublasCreate(&handle);
    cuda::gemm_bf16_f32out(handle, d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(), d_y.as<float>(), n,
                           in, out, nullptr);
    cudaDeviceSynchronize();
    cublasDestroy(handle);
    std::vector<float> got(expected.size());
    d_y.download(got.data(), got.size() * 4);
    EXPECT_LT(test::max_abs_diff(got, expected), 1e-3) << "n=" << n;
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
}

}  // namespace
}  // namespace kvb
