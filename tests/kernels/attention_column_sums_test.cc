// attention_column_sums (H2O's accumulated attention from the rows' LSE) against explicit softmax
// rows in double, and against prefill_attention's column sums over a prefill cut into two chunks.
#include "kernels/cpu/attention_column_sums.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tests/kernels/random_vectors.h"
#include "tests/kernels/softmax_row.h"

namespace kvb::kernels {
namespace {

using test::random_vector;

struct Shape {
  int n_query_heads, n_kv_heads, head_dim, n_queries, query_offset;
};

class ColumnSumsVsSoftmaxRows : public ::testing::TestWithParam<Shape> {};

// Strides wider than the data (a fused QKV row, spare cache rows, spare sums) and sums that
// already hold a value: the kernel adds to columns 0 .. offset + n - 1 and leaves the rest alone.
TEST_P(ColumnSumsVsSoftmaxRows, MatchesExplicitSoftmaxInDouble) {
  const Shape s = GetParam();
  const int hq = s.n_query_heads, hkv = s.n_kv_heads, d = s.head_dim, n = s.n_queries;
  const int n_keys = s.query_offset + n, group = hq / hkv;
  const int64_t q_stride = int64_t(hq + 2 * hkv) * d, kv_stride = int64_t(n_keys + 3) * d;
  const int64_t sums_stride = n_keys + 5;
  std::mt19937 rng(11);
  const auto q = random_vector(rng, size_t(n) * q_stride, 2.0f);
  const auto k = random_vector(rng, size_t(hkv) * kv_stride, 1.0f);
  const double scale = 1.0 / std::sqrt(double(d));

  std::vector<double> expected(size_t(hq) * sums_stride, 0.5), p;
  std::vector<float> lse(size_t(hq) * n);
  for (int a = 0; a < hq; ++a)
    for (int i = 0; i < n; ++i) {
      lse[a * n + i] =
          float(test::softmax_row(&q[i * q_stride + a * d], &k[(a / group) * kv_stride],
                                  s.query_offset + i + 1, d, scale, p));
      for (size_t j = 0; j < p.size(); ++j) expected[a * sums_stride + j] += p[j];
    }

  std::vector<float> sums(expected.size(), 0.5f);
  attention_column_sums({.q = q.data(),
                         .q_row_stride = q_stride,
                         .k = k.data(),
                         .kv_head_stride = kv_stride,
                         .lse = lse.data(),
                         .column_sums = sums.data(),
                         .sums_head_stride = sums_stride,
                         .n_queries = n,
                         .query_offset = s.query_offset,
                         .n_query_heads = hq,
                         .n_kv_heads = hkv,
                         .head_dim = d});
  for (int a = 0; a < hq; ++a)
    for (int j = 0; j < sums_stride; ++j) {
      const double want = expected[a * sums_stride + j];
      ASSERT_NEAR(sums[a * sums_stride + j], want, 1e-5 * want + 1e-6)
          << "head " << a << " key " << j;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ColumnSumsVsSoftmaxRows,
                         ::testing::Values(Shape{4, 4, 16, 1, 0}, Shape{8, 2, 16, 70, 0},
                                           Shape{7, 1, 32, 45, 29}, Shape{6, 2, 64, 33, 100}));

// A prefill in two chunks through prefill_attention (its column sums, its LSE) and the same chunks
// through attention_column_sums fed that LSE: the accumulated sums agree.
TEST(ColumnSums, ChunkedPrefillMatchesCausalAttention) {
  const int hq = 8, hkv = 2, d = 32, group = hq / hkv;
  const int chunks[2] = {50, 41}, n_keys = chunks[0] + chunks[1];
  std::mt19937 rng(12);
  const auto q = random_vector(rng, size_t(n_keys) * hq * d, 2.0f);
  const auto k = random_vector(rng, size_t(hkv) * n_keys * d, 1.0f);
  const auto v = random_vector(rng, size_t(hkv) * n_keys * d, 1.0f);
  std::vector<float> by_attention(size_t(hq) * n_keys, 0.0f), by_lse(by_attention.size(), 0.0f);
  int offset = 0;
  for (const int n : chunks) {
    PrefillAttentionArgs attention;
    attention.n_query_heads = hq;
    attention.n_kv_heads = hkv;
    attention.head_dim = d;
    attention.n_queries = n;
    attention.queries = q.data() + int64_t(offset) * hq * d;
    for (int h = 0; h < hkv; ++h) {
      attention.keys.push_back(k.data() + int64_t(h) * n_keys * d);
      attention.values.push_back(v.data() + int64_t(h) * n_keys * d);
      attention.prefix.push_back(offset);
    }
    std::vector<float> out(size_t(n) * hq * d), lse(size_t(hq) * n);
    attention.output = out.data();
    attention.row_log_sum_exp = lse.data();
    for (int a = 0; a < hq; ++a) attention.column_sums.push_back(&by_attention[a * n_keys]);
    prefill_attention(attention);
    attention_column_sums({.q = attention.queries,
                           .q_row_stride = int64_t(hq) * d,
                           .k = k.data(),
                           .kv_head_stride = int64_t(n_keys) * d,
                           .lse = lse.data(),
                           .column_sums = by_lse.data(),
                           .sums_head_stride = n_keys,
                           .n_queries = n,
                           .query_offset = offset,
                           .n_query_heads = hq,
                           .n_kv_heads = hkv,
                           .head_dim = d});
    offset += n;
  }
  for (size_t i = 0; i < by_lse.size(); ++i)
    ASSERT_NEAR(by_lse[i], by_attention[i], 1e-4 * by_attention[i] + 1e-6)
        << "head " << i / n_keys << " key " << i % n_keys << " (group " << group << ")";
}

TEST(ColumnSums, RejectsHeadsThatAreNotGroupsAndShortStrides) {
  std::vector<float> buffer(4096, 0.0f);
  ColumnSumsArgs args{.q = buffer.data(),
                      .q_row_stride = 3 * 16,
                      .k = buffer.data(),
                      .kv_head_stride = 4 * 16,
                      .lse = buffer.data(),
                      .column_sums = buffer.data(),
                      .sums_head_stride = 4,
                      .n_queries = 4,
                      .n_query_heads = 3,
                      .n_kv_heads = 2,
                      .head_dim = 16};
  EXPECT_THROW(attention_column_sums(args), std::invalid_argument);
  args.n_kv_heads = 1;
  args.sums_head_stride = 3;
  EXPECT_THROW(attention_column_sums(args), std::invalid_argument);
}

}  // namespace
}  // namespace kvb::kernels
