// The fused DropKV scorer against its CPU twin (kernels/cpu/dropkv_scores.h), fed the same window
// outputs and LSE; pooling, window protection and top-k against brute force on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/dropkv_scores.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/dropkv_scores.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

using test::random_bf16_values;

struct Shape {
  int head_dim, n_query_heads, n_kv_heads, length, window;
};

class DropKvScoresTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DropKvScoresTest, FusedScorerMatchesCpu) {
  KVB_REQUIRE_GPU();
  const Shape s = GetParam();
  const int d = s.head_dim, L = s.length, W = s.window, hq = s.n_query_heads, hkv = s.n_kv_heads;
  // Queries [W, Hq*d] as the engine holds them; keys/values [Hkv, L, d].
  auto q = random_bf16_values(size_t(W) * hq * d, 21, 2.0f);
  auto k = random_bf16_values(size_t(hkv) * L * d, 22, 1.0f);
  auto v = random_bf16_values(size_t(hkv) * L * d, 23, 1.0f);
  auto d_q = test::to_device_bf16(q), d_k = test::to_device_bf16(k), d_v = test::to_device_bf16(v);
  cuda::DeviceBuffer d_y(size_t(W) * hq * d * 2), d_lse(size_t(hq) * W * 4), d_scores(size_t(hkv) * L * 4);

  cuda::PrefillAttentionArgs window;
  window.q = d_q.as<__nv_bfloat16>();
  window.q_row_stride = int64_t(hq) * d;
  window.k = d_k.as<__nv_bfloat16>();
  window.v = d_v.as<__nv_bfloat16>();
  window.kv_head_stride = int64_t(L) * d;
  window.out = d_y.as<__nv_bfloat16>();
  window.out_row_stride = int64_t(hq) * d;
  window.lse = d_lse.as<float>();
  window.n_queries = W;
  window.query_offset = L - W;
  window.n_query_heads = hq;
  window.n_kv_heads = hkv;
  window.head_dim = d;
  window.scale = 1.0f / std::sqrt(float(d));
  cuda::flash_attention_prefill(window, nullptr);

  cuda::DropKvScoreArgs gpu;
  gpu.queries = d_q.as<__nv_bfloat16>();
  gpu.outputs = d_y.as<__nv_bfloat16>();
  gpu.row_stride = int64_t(hq) * d;
  gpu.lse = d_lse.as<float>();
  gpu.keys = d_k.as<__nv_bfloat16>();
  gpu.values = d_v.as<__nv_bfloat16>();
  gpu.head_stride = int64_t(L) * d;
  gpu.n_query_heads = hq;
  gpu.n_kv_heads = hkv;
  gpu.head_dim = d;
  gpu.length = L;
  gpu.window = W;
  gpu.scores = d_scores.as<float>();
  cuda::dropkv_scores(gpu, nullptr);
  std::vector<float> got(size_t(hkv) * L);
  d_scores.download(got.data(), got.size() * 4);

  // CPU twin on the same y and LSE, rearranged to [Hq, W, d].
  const auto y_rows = test::from_device_bf16(d_y, size_t(W) * hq * d);
  std::vector<float> lse(size_t(hq) * W);
  d_lse.download(lse.data(), lse.size() * 4);
  std::vector<float> q_heads(q.size()), y_heads(q.size());
  for (int t = 0; t < W; ++t)
    for (int a = 0; a < hq; ++a)
      for (int i = 0; i < d; ++i) {
        q_heads[(size_t(a) * W + t) * d + i] = q[(size_t(t) * hq + a) * d + i];
        y_heads[(size_t(a) * W + t) * d + i] = y_rows[(size_t(t) * hq + a) * d + i];
      }
  std::vector<float> expected(got.size());
  kernels::DropKvScoreArgs cpu{hq, hkv, d, L, W, q_heads.data(), y_heads.data(), lse.data(),
                               k.data(), v.data(), true, expected.data()};
  kernels::dropkv_scores(cpu);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - expected[i]) / (std::abs(expected[i]) + 1e-3));
  // bf16 rounding of p may land on the other side of a rounding boundary: ~1% on ω.
  EXPECT_LT(worst, 3e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DropKvScoresTest,
                         ::testing::Values(Shape{128, 32, 8, 300, 8}, Shape{64, 9, 3, 1000, 8},
                                           Shape{128, 8, 2, 130, 32}, Shape{128, 4, 4, 64, 8}));

TEST(DropKvSelection, PoolProtectAndTopKMatchBruteForce) {
  KVB_REQUIRE_GPU();
  const int heads = 3, length = 500, kernel = 11, window = 8, keep = 50;
  std::vector<float> raw(heads * length);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = float((i * 7919) % 97);  // many ties
  for (bool max_pool : {true, false}) {
    std::vector<float> pooled(raw.size());
    for (int h = 0; h < heads; ++h) {
      float best = -INFINITY;
      for (int j = 0; j < length; ++j) {
        float acc = max_pool ? -INFINITY : 0.f;
        for (int o = -kernel / 2; o <= kernel / 2; ++o) {
          if (j + o < 0 || j + o >= length) continue;
          acc = max_pool ? std::max(acc, raw[h * length + j + o]) : acc + raw[h * length + j + o];
        }
        pooled[h * length + j] = max_pool ? acc : acc / kernel;
        best = std::max(best, pooled[h * length + j]);
      }
      for (int j = length - window; j < length; ++j) pooled[h * length + j] = best + 1;
    }
    auto d_raw = test::to_device(raw);
    cuda::DeviceBuffer d_pooled(raw.size() * 4), d_kept(heads * keep * 4),
        workspace(cuda::topk_workspace_bytes(heads, length));
    cuda::pool_and_protect(d_raw.as<float>(), d_pooled.as<float>(), heads, length, kernel, max_pool, window,
                           nullptr);
    cuda::topk_sorted(d_pooled.as<float>(), heads, length, keep, d_kept.as<int32_t>(), workspace.data(),
                      nullptr);
    std::vector<float> got_pooled(raw.size());
    d_pooled.download(got_pooled.data(), got_pooled.size() * 4);
    for (size_t i = 0; i < raw.size(); ++i) ASSERT_NEAR(got_pooled[i], pooled[i], 1e-4) << i;
    std::vector<int32_t> kept(heads * keep);
    d_kept.download(kept.data(), kept.size() * 4);
    for (int h = 0; h < heads; ++h) {
      std::vector<int32_t> order(length);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return pooled[h * length + a] > pooled[h * length + b]; });
      std::vector<int32_t> expected(order.begin(), order.begin() + keep);
      std::sort(expected.begin(), expected.end());
      std::vector<int32_t> got(kept.begin() + h * keep, kept.begin() + (h + 1) * keep);
      EXPECT_EQ(got, expected) << "head " << h << (max_pool ? " max" : " avg");
    }
  }
}

}  // namespace
}  // namespace kvb
