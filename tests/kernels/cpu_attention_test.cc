// CPU attention kernels against textbook double-precision attention on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"

namespace kvb::kernels {
namespace {

std::vector<float> random_vector(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Softmax-weighted sum in double over entries [0, seen); returns probabilities too.
std::vector<double> naive_attention(const float* q, const float* k, const float* v, int seen, int d,
                                    std::vector<double>* probabilities, double* lse) {
  std::vector<double> s(seen);
  double mx = -1e300, z = 0;
  for (int j = 0; j < seen; ++j) {
    double dotp = 0;
    for (int i = 0; i < d; ++i) dotp += double(q[i]) * k[j * d + i];
    mx = std::max(mx, s[j] = dotp / std::sqrt(double(d)));
  }
  for (auto& e : s) z += (e = std::exp(e - mx));
  std::vector<double> out(d, 0.0);
  for (int j = 0; j < seen; ++j)
    for (int i = 0; i < d; ++i) out[i] += s[j] / z * v[j * d + i];
  if (probabilities) {
    probabilities->resize(seen);
    for (int j = 0; j < seen; ++j) (*probabilities)[j] = s[j] / z;
  }
  if (lse) *lse = mx + std::log(z);
  return out;
}

TEST(CausalAttention, MatchesNaiveWithPrefixGqaAndColumnSums) {
  std::mt19937 rng(3);
  const int Hq = 6, Hkv = 2, d = 16, T = 150, d_q = Hq * d;
  // A prefill (no prefix) and a chunk over cached entries of different lengths per KV head.
  for (const std::vector<int>& pre : {std::vector<int>{0, 0}, std::vector<int>{37, 5}}) {
    std::vector<std::vector<float>> keys, values;
    PrefillAttentionArgs args;
    args.n_query_heads = Hq;
    args.n_kv_heads = Hkv;
    args.head_dim = d;
    args.n_queries = T;
    const auto q = random_vector(rng, size_t(T) * d_q);
    args.queries = q.data();
    for (int h = 0; h < Hkv; ++h) {
      keys.push_back(random_vector(rng, size_t(pre[h] + T) * d));
      values.push_back(random_vector(rng, size_t(pre[h] + T) * d));
    }
    for (int h = 0; h < Hkv; ++h) {
      args.keys.push_back(keys[h].data());
      args.values.push_back(values[h].data());
    }
    args.prefix = pre;
    std::vector<float> out(size_t(T) * d_q), lse(size_t(Hq) * T);
    std::vector<std::vector<float>> sums(Hq);
    for (int a = 0; a < Hq; ++a) {
      sums[a].assign(pre[a / 3] + T, 0.0f);
      args.column_sums.push_back(sums[a].data());
    }
    args.output = out.data();
    args.row_log_sum_exp = lse.data();
    prefill_attention(args);
    for (int a = 0; a < Hq; ++a) {
      const int h = a / 3;
      std::vector<double> expected_sums(pre[h] + T, 0.0);
      for (int t = 0; t < T; ++t) {
        std::vector<double> p;
        double expected_lse;
        const auto expected = naive_attention(&q[t * d_q + a * d], keys[h].data(), values[h].data(),
                                              pre[h] + t + 1, d, &p, &expected_lse);
        for (int i = 0; i < d; ++i) ASSERT_NEAR(out[t * d_q + a * d + i], expected[i], 1e-5);
        ASSERT_NEAR(lse[a * T + t], expected_lse, 1e-4);
        for (size_t j = 0; j < p.size(); ++j) expected_sums[j] += p[j];
      }
      for (size_t j = 0; j < expected_sums.size(); ++j)
        ASSERT_NEAR(sums[a][j], expected_sums[j], 1e-4);
    }
    // Without column sums the (head, block) tasks give the same output.
    args.column_sums.clear();
    std::vector<float> out2(out.size());
    args.output = out2.data();
    prefill_attention(args);
    EXPECT_EQ(out, out2);
  }
}

TEST(DecodeAttention, AllEntriesMatchNaive) {
  std::mt19937 rng(5);
  const int n = 300, d = 64;
  const auto q = random_vector(rng, d), k = random_vector(rng, size_t(n) * d),
             v = random_vector(rng, size_t(n) * d);
  std::vector<float> out(d), probabilities(n);
  DecodeAttentionArgs args{.query = q.data(),
                           .keys = k.data(),
                           .values = v.data(),
                           .n_entries = n,
                           .head_dim = d,
                           .output = out.data(),
                           .probabilities = probabilities.data()};
  const float lse = decode_attention(args);
  std::vector<double> p;
  double expected_lse;
  const auto expected = naive_attention(q.data(), k.data(), v.data(), n, d, &p, &expected_lse);
  for (int i = 0; i < d; ++i) EXPECT_NEAR(out[i], expected[i], 1e-5);
  for (int j = 0; j < n; ++j) EXPECT_NEAR(probabilities[j], p[j], 1e-6);
  EXPECT_NEAR(lse, expected_lse, 1e-4);
}

TEST(DecodeAttention, IndicesAndLogitBiasReweightEntries) {
  const float q[4] = {1, 0, 0, 0};
  const float keys[12] = {1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0};
  const float values[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  const int32_t indices[2] = {2, 0};
  const float bias[2] = {0.0f, std::log(3.0f)};
  float out[4], probabilities[3];
  kernels::DecodeAttentionArgs args{.query = q,
                                    .keys = keys,
                                    .values = values,
                                    .n_entries = 3,
                                    .head_dim = 4,
                                    .indices = indices,
                                    .n_indices = 2,
                                    .logit_bias = bias,
                                    .output = out,
                                    .probabilities = probabilities,
                                    .scale = 1.0f};
  kernels::decode_attention(args);
  // logits: entry 2 -> 2, entry 0 -> 1 + ln 3. p2 = e^2 / (e^2 + 3e).
  const double p2 = std::exp(2.0) / (std::exp(2.0) + 3 * std::exp(1.0));
  EXPECT_NEAR(probabilities[2], p2, 1e-6);
  EXPECT_NEAR(probabilities[0], 1 - p2, 1e-6);
  EXPECT_EQ(probabilities[1], 0.0f);
  EXPECT_NEAR(out[2], p2, 1e-6);
  EXPECT_NEAR(out[0], 1 - p2, 1e-6);
}

TEST(Rope, Llama3ScalingFollowsTheThreeBands) {
  // theta 500000, d 128, factor 8, low 1, high 4, original 8192 (Llama-3.1's values).
  const auto plain = rope_inverse_frequencies(128, 500000.0f);
  const auto scaled = rope_inverse_frequencies_llama3(128, 500000.0f, {8.0f, 1.0f, 4.0f, 8192});
  int bands[3] = {0, 0, 0};
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelength = 2 * M_PI / plain[i];
    if (wavelength < 8192 / 4.0) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
      ++bands[0];
    } else if (wavelength > 8192) {
      EXPECT_FLOAT_EQ(scaled[i], plain[i] / 8) << i;
      ++bands[2];
    } else {
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8);
      ++bands[1];
    }
  }
  EXPECT_GT(bands[0], 0);
  EXPECT_GT(bands[1], 0);
  EXPECT_GT(bands[2], 0);
  EXPECT_FLOAT_EQ(plain[1], std::pow(500000.0f, -2.0f / 128));
}

TEST(Rope, PairingsRotateTheirPairs) {
  const std::vector<float> inv_freq = {1.0f, 0.5f};
  float interleaved[4] = {1, 0, 1, 0}, halves[4] = {1, 1, 0, 0};
  apply_rope(interleaved, 1, 4, 4, 1, inv_freq.data(), RopePairing::kInterleavedPairs);
  apply_rope(halves, 1, 4, 4, 1, inv_freq.data(), RopePairing::kHalves);
  EXPECT_NEAR(interleaved[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(interleaved[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(interleaved[3], std::sin(0.5), 1e-6);
  EXPECT_NEAR(halves[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(halves[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(halves[3], std::sin(0.5), 1e-6);
}

TEST(Softmax, StableForLargeLogitsAndReturnsLogSumExp) {
  std::vector<float> x = {1000.0f, 1000.0f, -INFINITY};
  const float lse = softmax(x.data(), 3);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_NEAR(lse, 1000.0 + std::log(2.0), 1e-3);
}

}  // namespace
}  // namespace kvb::kernels
