// DropKV's selection on the GPU (kernels/cuda/dropkv_scores.h): pooling, window protection and
// top-k against brute force on the host. The fused scorer against its CPU twin:
// tests/cuda/backend_ops_test.cc.
#include "kernels/cpu/dropkv_scores.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/dropkv_scores.h"
#include "kernels/cuda/topk_select.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

using test::random_bf16_values;

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
        workspace(cuda::topk_select_workspace_bytes(heads, length, cuda::TopkKeys::kF32)),
        pool_workspace(cuda::pool_and_protect_workspace_bytes(heads, length, kernel));
    cuda::pool_and_protect(d_raw.as<float>(), d_pooled.as<float>(), heads, length, kernel, max_pool,
                           window, pool_workspace.data(), nullptr);
    cuda::TopkSelectArgs top;
    top.scores = d_pooled.as<float>();
    top.key_stride = length;
    top.n_lists = heads;
    top.length = length;
    top.k = keep;
    top.indices = d_kept.as<int32_t>();
    top.index_stride = keep;
    top.workspace = workspace.data();
    top.workspace_bytes = workspace.bytes();
    cuda::topk_select(top, nullptr);
    std::vector<float> got_pooled(raw.size());
    d_pooled.download(got_pooled.data(), got_pooled.size() * 4);
    for (size_t i = 0; i < raw.size(); ++i) ASSERT_NEAR(got_pooled[i], pooled[i], 1e-4) << i;
    std::vector<int32_t> kept(heads * keep);
    d_kept.download(kept.data(), kept.size() * 4);
    for (int h = 0; h < heads; ++h) {
      std::vector<int32_t> order(length);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return pooled[h * length + a] > pooled[h * length + b];
      });
      std::vector<int32_t> expected(order.begin(), order.begin() + keep);
      std::sort(expected.begin(), expected.end());
      std::vector<int32_t> got(kept.begin() + h * keep, kept.begin() + (h + 1) * keep);
      EXPECT_EQ(got, expected) << "head " << h << (max_pool ? " max" : " avg");
    }
  }
}

}  // namespace
}  // namespace kvb
