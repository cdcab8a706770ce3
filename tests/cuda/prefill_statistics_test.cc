// The statistics a GPU prefill computes for the prefill policies (engine/cuda/prefill_statistics.h)
// against double-precision truth computed on the host from the same bf16 keys, values and window
// queries the device holds: window attention sums, output perturbations, key norms and attention
// column sums, over a prefill of several chunks; the window sums with the bf16 reference's casts
// against their CPU twin (kernels/cpu/window_attention_sums.h) on the same values. (The row-norm
// kernel against its CPU twin: tests/cuda/backend_ops_test.cc.)
#include "engine/cuda/prefill_statistics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/cuda/cuda_engine.h"
#include "engine/presets.h"
#include "kernels/cpu/window_attention_sums.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

TEST(PrefillChunkSize, EqualChunksSoThatTheLastHoldsTheWindow) {
  EXPECT_EQ(prefill_chunk_size(700, 16384), 700);
  EXPECT_EQ(prefill_chunk_size(16385, 16384), 8193);  // not 16384 + a 1-token chunk
  EXPECT_EQ(prefill_chunk_size(700, 256), 234);       // 234 + 234 + 232
  EXPECT_EQ(prefill_chunk_size(0, 256), 1);
}

// max |a - b| <= tolerance * max |b| over the whole array.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, worst = 0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, tolerance * scale) << what << ": max error " << worst << " of scale " << scale;
}

struct HostLayer {
  int L, d, hq, hkv;
  std::vector<float> keys, values;  // [Hkv, capacity, d]
  int64_t capacity;
  const float* key(int h, int j) const { return &keys[(h * capacity + j) * d]; }
  const float* value(int h, int j) const { return &values[(h * capacity + j) * d]; }
};

struct Truth {
  std::vector<double> window_sums, perturbations, key_norms, column_sums;
};

// The window statistics (from the last `window` of the `captured` window queries, [Hq, captured,
// d]) and the key norms of one layer, in double. Column sums have their own kernel test
// (tests/cuda/attention_column_sums_test.cc).
Truth truth_for(const HostLayer& m, const std::vector<float>& query_window, int captured,
                int window) {
  Truth t;
  t.window_sums.assign(size_t(m.hq) * m.L, 0.0);
  t.perturbations.assign(size_t(m.hkv) * m.L, 0.0);
  const int group = m.hq / m.hkv;
  for (int a = 0; a < m.hq; ++a) {
    const int h = a / group;
    for (int r = 0; r < window; ++r) {
      const float* q = &query_window[(size_t(a) * captured + captured - window + r) * m.d];
      const int visible = m.L - window + r + 1;
      std::vector<double> p(visible);
      double top = -1e300;
      for (int j = 0; j < visible; ++j) {
        double dot = 0;
        for (int i = 0; i < m.d; ++i) dot += double(q[i]) * m.key(h, j)[i];
        p[j] = dot / std::sqrt(double(m.d));
        top = std::max(top, p[j]);
      }
      double total = 0;
      for (double& x : p) total += (x = std::exp(x - top));
      std::vector<double> y(m.d, 0.0);
      for (int j = 0; j < visible; ++j) {
        p[j] /= total;
        t.window_sums[size_t(a) * m.L + j] += p[j];
        for (int i = 0; i < m.d; ++i) y[i] += p[j] * m.value(h, j)[i];
      }
      for (int j = 0; j < visible; ++j) {
        const double omega = std::pow(p[j] / (1 - p[j] + 1e-6), 2);
        double distance = 0;
        for (int i = 0; i < m.d; ++i) distance += std::pow(y[i] - m.value(h, j)[i], 2);
        t.perturbations[size_t(h) * m.L + j] += omega * distance / group;
      }
    }
  }
  for (int h = 0; h < m.hkv; ++h)
    for (int j = 0; j < m.L; ++j) {
      double squared = 0;
      for (int i = 0; i < m.d; ++i) squared += double(m.key(h, j)[i]) * m.key(h, j)[i];
      t.key_norms.push_back(std::sqrt(squared));
    }
  return t;
}

// The sums with the reference's casts against the CPU twin on the device's own bf16 queries and
// keys. A logit the two round to different sides of a bf16 boundary (their q·k differ in the last
// fp32 bit: FMA on the device) moves its p by up to |x| 2^-7 relative, so per key the sums agree to
// 2 % of the row's scale (tests/cuda/backend_ops_attention.h bounds the op on exact products).
void check_sums_with_casts(const HostLayer& m, const std::vector<float>& query_window, int captured,
                           int window, const std::vector<float>& got) {
  std::vector<float> want(size_t(m.hq) * m.L);
  kernels::window_attention_sums({.queries = query_window.data() + size_t(captured - window) * m.d,
                                  .query_row_stride = m.d,
                                  .query_head_stride = int64_t(captured) * m.d,
                                  .keys = m.keys.data(),
                                  .kv_head_stride = m.capacity * m.d,
                                  .sums = want.data(),
                                  .sums_head_stride = m.L,
                                  .length = m.L,
                                  .window = window,
                                  .n_query_heads = m.hq,
                                  .n_kv_heads = m.hkv,
                                  .head_dim = m.d,
                                  .reference_bf16_casts = true});
  expect_close(got, std::vector<double>(want.begin(), want.end()), 2e-2,
               "window sums with casts w = " + std::to_string(window));
}

void check_statistics_on(int head_dim) {
  ModelConfig config = test::small_random_model("random-statistics", 2, 256, head_dim, 512, 1000);
  config.qkv_bias = true;
  auto weights = random_weights(config, 5);
  auto gpu = CudaEngine::from_weights(*weights);
  const int L = 700;
  gpu->allocate_cache(1, L + 4);
  CaptureRequest request;
  request.window_queries = 32;
  request.window_attention_sums = {{8, false}, {32, false}, {32, true}};
  request.output_perturbations = {{8, false}};
  request.key_norms = true;
  PrefillCapture capture;
  gpu->prefill_with_captures(0, test::strided_token_ids(L, 37, 11, 1000), request, capture,
                             /*chunk_tokens=*/256);
  ASSERT_EQ(capture.window, 32);
  ASSERT_EQ(capture.window_attention_sums.size(), 3u);
  ASSERT_EQ(capture.output_perturbations.size(), 1u);
  for (int l = 0; l < config.n_layers; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    HostLayer m{L,
                head_dim,
                config.n_query_heads,
                config.n_kv_heads,
                gpu->cached_sequence(l, 0, false),
                gpu->cached_sequence(l, 0, true),
                gpu->capacity()};
    for (int i = 0; i < 3; ++i) {
      const WindowSumsRequest& sums = capture.window_attention_sums[i].request;
      const int window = sums.window;
      if (sums.reference_bf16_casts) {
        check_sums_with_casts(m, capture.query_window[l], capture.window, window,
                              capture.window_attention_sums[i].per_layer[l]);
        continue;
      }
      const Truth truth = truth_for(m, capture.query_window[l], capture.window, window);
      expect_close(capture.window_attention_sums[i].per_layer[l], truth.window_sums, 1e-3,
                   "window sums w = " + std::to_string(window));
      if (window == 8) {
        expect_close(capture.output_perturbations[0].per_layer[l], truth.perturbations, 1e-2,
                     "perturbations");
        expect_close(capture.key_norms[l], truth.key_norms, 1e-5, "key norms");
      }
    }
  }
}

TEST(PrefillStatistics, MatchDoublePrecisionTruthOverSeveralChunks) {
  KVB_REQUIRE_GPU();
  check_statistics_on(64);
  check_statistics_on(128);
}

}  // namespace
}  // namespace kvb
