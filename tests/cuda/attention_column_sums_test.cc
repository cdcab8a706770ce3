// The column-sums kernel (H2O's accumulated attention) fed by prefill_attention's own LSE,
// chunk by chunk, against its CPU twin (kernels/cpu/attention_column_sums.h) over the whole prompt
// with an LSE computed on the host in double; and its refusals. Against the twin over many shapes,
// both fed the same LSE: tests/cuda/backend_ops_test.cc.
#include "kernels/cuda/attention_column_sums.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_column_sums.h"
#include "kernels/cuda/attention.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/softmax_row.h"

namespace kvb {
namespace {

using test::random_bf16_values;

struct Shape {
  int head_dim, n_query_heads, n_kv_heads, n_queries, query_offset;
};

// Queries in rows of a fused QKV projection ([n, (Hq + 2 Hkv) d]), keys with spare rows per head,
// sums with spare columns: every stride differs from the data's width.
struct Problem {
  explicit Problem(const Shape& s)
      : shape(s),
        n_keys(s.query_offset + s.n_queries),
        q_stride(int64_t(s.n_query_heads + 2 * s.n_kv_heads) * s.head_dim),
        kv_stride(int64_t(n_keys + 8) * s.head_dim),
        sums_stride(n_keys + 3),
        q(random_bf16_values(size_t(s.n_queries) * q_stride, 31 + s.n_queries, 3.0f)),
        k(random_bf16_values(size_t(s.n_kv_heads) * kv_stride, 32 + n_keys, 1.0f)) {}

  // lse[a][i] of queries [first, first + count) in double, rounded to float: [Hq, count].
  std::vector<float> host_lse(int first, int count) const {
    const int d = shape.head_dim, group = shape.n_query_heads / shape.n_kv_heads;
    std::vector<float> lse(size_t(shape.n_query_heads) * count);
    std::vector<double> p;
    for (int a = 0; a < shape.n_query_heads; ++a)
      for (int i = first; i < first + count; ++i)
        lse[size_t(a) * count + i - first] = float(
            test::softmax_row(q.data() + i * q_stride + a * d, k.data() + (a / group) * kv_stride,
                              shape.query_offset + i + 1, d, 1.0 / std::sqrt(double(d)), p));
    return lse;
  }

  // Queries [first, first + count) as a chunk at query_offset + first, for either twin: q and k
  // are the host floats or the device bf16 copies.
  template <class Args, class T>
  Args chunk(const T* q_data, const T* k_data, const float* lse, float* sums, int first,
             int count) const {
    return {.q = q_data + first * q_stride,
            .q_row_stride = q_stride,
            .k = k_data,
            .kv_head_stride = kv_stride,
            .lse = lse,
            .column_sums = sums,
            .sums_head_stride = sums_stride,
            .n_queries = count,
            .query_offset = shape.query_offset + first,
            .n_query_heads = shape.n_query_heads,
            .n_kv_heads = shape.n_kv_heads,
            .head_dim = shape.head_dim};
  }
  void cpu_chunk(int first, int count, const std::vector<float>& lse,
                 std::vector<float>& sums) const {
    kernels::attention_column_sums(
        chunk<kernels::ColumnSumsArgs>(q.data(), k.data(), lse.data(), sums.data(), first, count));
  }
  cuda::ColumnSumsArgs gpu_chunk(const cuda::DeviceBuffer& d_q, const cuda::DeviceBuffer& d_k,
                                 const float* d_lse, cuda::DeviceBuffer& d_sums, int first,
                                 int count) const {
    return chunk<cuda::ColumnSumsArgs>(d_q.as<__nv_bfloat16>(), d_k.as<__nv_bfloat16>(), d_lse,
                                       d_sums.as<float>(), first, count);
  }

  Shape shape;
  int n_keys;
  int64_t q_stride, kv_stride, sums_stride;
  std::vector<float> q, k;
};

// Within 1e-3 of the twin's value + 1e-5, and columns past the keys untouched.
void expect_sums_match(const std::vector<float>& got, const std::vector<float>& expected,
                       const Problem& p) {
  int bad = 0;
  for (size_t x = 0; x < got.size() && bad < 10; ++x) {
    const double want = expected[x];
    if (std::abs(got[x] - want) > 1e-3 * std::abs(want) + 1e-5) {
      ADD_FAILURE() << "head " << x / p.sums_stride << " key " << x % p.sums_stride << ": got "
                    << got[x] << ", CPU " << want;
      ++bad;
    }
  }
}

// A prefill of 300 tokens in chunks of 128, 100 and 72, each chunk's LSE from
// prefill_attention on the device: the accumulated sums equal the twin's over the whole
// prompt with the host LSE (the engine's use).
TEST(ColumnSumsKernel, ChunkedPrefillWithFlashLseAccumulates) {
  KVB_REQUIRE_GPU();
  const Problem p(Shape{128, 8, 2, 300, 0});
  const int hq = 8, hkv = 2, d = 128;
  std::vector<float> expected(size_t(hq) * p.sums_stride, 0.0f);
  p.cpu_chunk(0, 300, p.host_lse(0, 300), expected);

  const auto v = random_bf16_values(p.k.size(), 33, 1.0f);
  auto d_q = test::to_device_bf16(p.q), d_k = test::to_device_bf16(p.k);
  auto d_v = test::to_device_bf16(v);
  auto d_sums = test::to_device(std::vector<float>(expected.size(), 0.0f));
  cuda::DeviceBuffer d_out(size_t(300) * hq * d * 2), d_lse(size_t(hq) * 300 * 4);
  int first = 0;
  for (const int count : {128, 100, 72}) {
    const cuda::PrefillAttentionArgs forward{.q = d_q.as<__nv_bfloat16>() + first * p.q_stride,
                                             .q_row_stride = p.q_stride,
                                             .k = d_k.as<__nv_bfloat16>(),
                                             .v = d_v.as<__nv_bfloat16>(),
                                             .kv_head_stride = p.kv_stride,
                                             .out = d_out.as<__nv_bfloat16>(),
                                             .out_row_stride = int64_t(hq) * d,
                                             .lse = d_lse.as<float>(),
                                             .n_queries = count,
                                             .query_offset = first,
                                             .n_query_heads = hq,
                                             .n_kv_heads = hkv,
                                             .head_dim = d,
                                             .scale = 1.0f / std::sqrt(float(d))};
    cuda::prefill_attention(forward, nullptr);
    cuda::attention_column_sums(p.gpu_chunk(d_q, d_k, d_lse.as<float>(), d_sums, first, count),
                                nullptr);
    first += count;
  }
  std::vector<float> got(expected.size());
  d_sums.download(got.data(), got.size() * 4);
  expect_sums_match(got, expected, p);
}

TEST(ColumnSumsKernel, RejectsUnsupportedHeadDimAndMisalignedStrides) {
  cuda::ColumnSumsArgs args{.q_row_stride = 8,
                            .kv_head_stride = 8,
                            .n_queries = 1,
                            .n_query_heads = 2,
                            .n_kv_heads = 2,
                            .head_dim = 96};
  EXPECT_THROW(cuda::attention_column_sums(args, nullptr), std::invalid_argument);
  args.head_dim = 64;
  args.q_row_stride = 68;
  EXPECT_THROW(cuda::attention_column_sums(args, nullptr), std::invalid_argument);
  args.q_row_stride = 64;
  args.n_kv_heads = 3;
  EXPECT_THROW(cuda::attention_column_sums(args, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace kvb
