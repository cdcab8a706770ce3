// kernels/cuda/projected_value_norms against its CPU twin (kernels/cpu/projected_value_norms.h) on
// bf16-exact random values and W_o: GQA groups of 1, 2 and 7, lengths of one row, an odd count and
// more than one product chunk (kProjectedRows), heads at a cache-like stride.
#include "kernels/cuda/projected_value_norms.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/projected_value_norms.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

struct Shape {
  int n_query_heads, n_kv_heads, dim, hidden, length;
};

void expect_matches_cpu(const Shape& s) {
  SCOPED_TRACE("Hq " + std::to_string(s.n_query_heads) + ", Hkv " + std::to_string(s.n_kv_heads) +
               ", length " + std::to_string(s.length));
  const int64_t head_stride = int64_t(s.length + 5) * s.dim;  // spare rows, as a cache has
  const std::vector<float> values =
      test::random_bf16_values(size_t(head_stride) * s.n_kv_heads, 17);
  const std::vector<float> wo = test::random_bf16_values(size_t(s.hidden) * s.n_query_heads * s.dim,
                                                         23, 1.0f / std::sqrt(float(s.dim)));
  std::vector<float> expected(size_t(s.n_kv_heads) * s.length);
  for (int h = 0; h < s.n_kv_heads; ++h) {
    kernels::ProjectedValueNormsArgs a;
    a.values = values.data() + h * head_stride;
    a.output_projection = wo.data();
    a.n_query_heads = s.n_query_heads;
    a.n_kv_heads = s.n_kv_heads;
    a.kv_head = h;
    a.length = s.length;
    a.dim = s.dim;
    a.hidden = s.hidden;
    a.norms = expected.data() + int64_t(h) * s.length;
    kernels::projected_value_norms(a);
  }

  const cuda::DeviceBuffer d_values = test::to_device_bf16(values), d_wo = test::to_device_bf16(wo);
  cuda::DeviceBuffer norms(expected.size() * 4, "norms");
  cuda::DeviceBuffer workspace(cuda::projected_value_norms_workspace_floats(s.hidden) * 4, "ws");
  cublasHandle_t cublas;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  cuda::ProjectedValueNormsArgs a;
  a.values = d_values.as<__nv_bfloat16>();
  a.head_stride = head_stride;
  a.output_projection = d_wo.as<__nv_bfloat16>();
  a.n_query_heads = s.n_query_heads;
  a.n_kv_heads = s.n_kv_heads;
  a.length = s.length;
  a.dim = s.dim;
  a.hidden = s.hidden;
  a.norms = norms.as<float>();
  a.workspace = workspace.as<float>();
  cuda::projected_value_norms(cublas, a, nullptr);
  cuda::check(cudaDeviceSynchronize(), "projected_value_norms");
  cublasDestroy(cublas);
  std::vector<float> got(expected.size());
  norms.download(got.data(), got.size() * 4);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], 1e-4 * std::abs(expected[i]) + 1e-5) << "entry " << i;
}

TEST(ProjectedValueNorms, MatchesTheCpuTwin) {
  KVB_REQUIRE_GPU();
  expect_matches_cpu({4, 2, 64, 256, 1});
  expect_matches_cpu({4, 2, 64, 256, 37});
  expect_matches_cpu({2, 2, 128, 256, 300});
  expect_matches_cpu({14, 2, 64, 896, cuda::kProjectedRows + 33});
}

}  // namespace
}  // namespace kvb
