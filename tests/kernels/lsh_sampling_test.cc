// LSH sampling (kernels/cpu/lsh_sampling.h) against brute force: the codes are the sign bits of the
// centred keys' projections, the sampling probability is the binomial tail it claims to be (and
// the frequency with which random projections do sample a key of a given angle), and a list holds
// the exact entries, the keys that collide often enough in increasing order with -log(u + 1e-4),
// and the tail.
#include "kernels/cpu/lsh_sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "tests/kernels/random_vectors.h"

namespace kvb::kernels {
namespace {

using test::random_vector;

// Σ_{c >= t} C(L, c) q^c (1 - q)^(L - c), q = p^K, term by term from lgamma.
double binomial_tail(double p, int K, int L, int t) {
  const double q = std::pow(p, K);
  if (q >= 1.0) return 1.0;
  if (q <= 0.0) return t == 0 ? 1.0 : 0.0;
  double sum = 0;
  for (int c = t; c <= L; ++c)
    sum += std::exp(std::lgamma(L + 1.0) - std::lgamma(c + 1.0) - std::lgamma(L - c + 1.0) +
                    c * std::log(q) + (L - c) * std::log1p(-q));
  return sum;
}

// Code of table l of x: Σ_i 2^i [x . row_{lK+i} > 0], products in long double.
std::vector<uint16_t> brute_codes(const std::vector<float>& rows, int K, int L, int d,
                                  const std::vector<long double>& x) {
  std::vector<uint16_t> codes(L, 0);
  for (int l = 0; l < L; ++l) {
    int code = 0;
    for (int i = 0; i < K; ++i) {
      long double along = 0;
      for (int t = 0; t < d; ++t) along += x[t] * rows[(static_cast<size_t>(l) * K + i) * d + t];
      code += along > 0 ? (1 << i) : 0;
    }
    codes[l] = static_cast<uint16_t>(code);
  }
  return codes;
}

// The middle keys [begin, end) hashed around `mean`, and the query's codes.
struct Hashed {
  std::vector<float> mean, norms;
  std::vector<uint16_t> codes, query_codes;
};

Hashed hash_middle(const LshTables& tables, const std::vector<float>& keys, int begin, int end,
                   const std::vector<float>& mean, const std::vector<float>& q) {
  Hashed h{mean, std::vector<float>(end - begin),
           std::vector<uint16_t>(static_cast<size_t>(tables.tables) * (end - begin), 7),
           std::vector<uint16_t>(tables.tables, 7)};
  lsh_hash_keys(tables, keys.data(), begin, end, mean.data(), h.codes.data(), end - begin,
                h.norms.data());
  lsh_hash_queries(tables, q.data(), 1, h.query_codes.data());
  return h;
}

// One query's list over a cache of `length` entries.
struct Sampled {
  std::vector<int32_t> indices;
  std::vector<float> bias;
};

Sampled sample(const LshTables& tables, int min_collisions, const std::vector<float>& keys,
               int begin, int end, int length, const Hashed& h, const std::vector<float>& q) {
  Sampled out;
  lsh_sample_lists({.tables = tables,
                    .min_collisions = min_collisions,
                    .keys = keys.data(),
                    .middle_begin = begin,
                    .middle_end = end,
                    .length = length,
                    .mean = h.mean.data(),
                    .key_codes = h.codes.data(),
                    .code_table_stride = end - begin,
                    .centred_norms = h.norms.data(),
                    .queries = q.data(),
                    .query_codes = h.query_codes.data()},
                   &out.indices, &out.bias);
  return out;
}

TEST(LshSampling, MeanCodesAndNormsAreThoseOfTheCentredKeys) {
  std::mt19937 rng(5);
  const int d = 24, K = 7, L = 9, n = 90, begin = 4, end = 70;
  const std::vector<float> rows = random_vector(rng, static_cast<size_t>(K) * L * d, 1.0f);
  std::vector<float> keys = random_vector(rng, static_cast<size_t>(n) * d, 1.0f);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] += (i % d) * 0.25f;  // an offset to centre away
  const std::vector<float> mean = lsh_key_mean(keys.data(), begin, end, d);
  for (int t = 0; t < d; ++t) {
    long double sum = 0;
    for (int j = begin; j < end; ++j) sum += keys[static_cast<size_t>(j) * d + t];
    EXPECT_NEAR(mean[t], static_cast<double>(sum / (end - begin)), 1e-6) << t;
  }
  const LshTables tables{rows.data(), K, L, d};
  const int hashed = end - begin, stride = hashed + 3;
  std::vector<uint16_t> codes(static_cast<size_t>(L) * stride, 0xABCD);
  std::vector<float> norms(hashed);
  lsh_hash_keys(tables, keys.data(), begin, end, mean.data(), codes.data(), stride, norms.data());
  for (int j = begin; j < end; ++j) {
    std::vector<long double> centred(d);
    long double sq = 0;
    for (int t = 0; t < d; ++t) {
      centred[t] = keys[static_cast<size_t>(j) * d + t] - static_cast<long double>(mean[t]);
      sq += centred[t] * centred[t];
    }
    EXPECT_NEAR(norms[j - begin], static_cast<double>(std::sqrt(sq)), 1e-5) << j;
    const std::vector<uint16_t> want = brute_codes(rows, K, L, d, centred);
    for (int l = 0; l < L; ++l)
      ASSERT_EQ(codes[static_cast<size_t>(l) * stride + j - begin], want[l]) << j << " " << l;
  }
  EXPECT_EQ(codes[hashed], 0xABCD) << "nothing written past the hashed keys";
  std::vector<uint16_t> query_codes(L);
  lsh_hash_queries(tables, keys.data(), 1, query_codes.data());
  const std::vector<long double> first(keys.begin(), keys.begin() + d);
  EXPECT_EQ(query_codes, brute_codes(rows, K, L, d, first)) << "a query is not centred";
}

TEST(LshSampling, ProbabilityIsTheBinomialTail) {
  for (const int K : {0, 1, 4, 10})
    for (const int L : {1, 6, 150})
      for (const int t : {1, 2, 5})
        for (const double p : {0.0, 0.3, 0.5, 0.77, 0.95, 1.0}) {
          if (t > L) continue;
          EXPECT_NEAR(lsh_sampling_probability(p, K, L, t), binomial_tail(p, K, L, t), 1e-9)
              << "p " << p << " K " << K << " L " << L << " t " << t;
        }
}

// Over random projections, a key at angle theta from the query lands in a table with
// probability (1 - theta / pi)^K: the fraction of draws that sample it is u.
TEST(LshSampling, RandomProjectionsSampleAKeyWithProbabilityU) {
  std::mt19937 rng(8);
  const int d = 16, K = 2, L = 6, t = 2, draws = 4000;
  const std::vector<float> q = random_vector(rng, d, 1.0f);
  std::vector<float> keys = random_vector(rng, static_cast<size_t>(3) * d, 1.0f);
  const std::vector<float> zero(d, 0.0f);
  double cosine = 0;
  int sampled = 0;
  for (int draw = 0; draw < draws; ++draw) {
    const std::vector<float> rows = random_vector(rng, static_cast<size_t>(K) * L * d, 1.0f);
    const LshTables tables{rows.data(), K, L, d};
    const Hashed hashed = hash_middle(tables, keys, 1, 2, zero, q);
    const std::vector<int32_t> indices = sample(tables, t, keys, 1, 2, 2, hashed, q).indices;
    sampled += indices.size() == 2;
    if (draw == 0) {
      double dot = 0, qq = 0, kk = 0;
      for (int i = 0; i < d; ++i) {
        dot += double{q[i]} * keys[d + i];
        qq += double{q[i]} * q[i];
        kk += double{keys[d + i]} * keys[d + i];
      }
      cosine = dot / std::sqrt(qq * kk);
    }
  }
  const double u = binomial_tail(1.0 - std::acos(cosine) / std::numbers::pi, K, L, t);
  const double sigma = std::sqrt(u * (1 - u) / draws);
  EXPECT_NEAR(static_cast<double>(sampled) / draws, u, 4 * sigma + 1e-3) << "u " << u;
}

// A list against counting collisions table by table and the binomial tail, with an entry planted
// in the query's direction (it collides everywhere: u = 1).
TEST(LshSampling, ListHoldsExactEntriesThenCollidingKeysThenTheTail) {
  std::mt19937 rng(9);
  const int d = 16, K = 3, L = 12, t = 2, length = 300, begin = 4, end = 230;
  const std::vector<float> rows = random_vector(rng, static_cast<size_t>(K) * L * d, 1.0f);
  std::vector<float> keys = random_vector(rng, static_cast<size_t>(length) * d, 1.0f);
  const std::vector<float> q = random_vector(rng, d, 2.0f);
  const std::vector<float> mean = lsh_key_mean(keys.data(), begin, end, d);
  for (int i = 0; i < d; ++i) keys[100 * d + i] = mean[i] + 0.5f * q[i];
  const LshTables tables{rows.data(), K, L, d};
  const int hashed = end - begin;
  const Hashed h = hash_middle(tables, keys, begin, end, mean, q);
  const auto [indices, bias] = sample(tables, t, keys, begin, end, length, h, q);
  std::vector<int32_t> want;
  std::vector<double> want_bias;
  for (int j = 0; j < begin; ++j) want.push_back(j), want_bias.push_back(0);
  for (int j = begin; j < end; ++j) {
    int together = 0;
    for (int l = 0; l < L; ++l)
      together += h.codes[static_cast<size_t>(l) * hashed + j - begin] == h.query_codes[l];
    if (together < t) continue;
    double dot = 0, qq = 0, kk = 0;
    for (int i = 0; i < d; ++i) {
      const double c = keys[static_cast<size_t>(j) * d + i] - double{mean[i]};
      dot += q[i] * c;
      qq += double{q[i]} * q[i];
      kk += c * c;
    }
    const double p =
        1.0 - std::acos(std::clamp(dot / std::sqrt(qq * kk), -1.0, 1.0)) / std::numbers::pi;
    want.push_back(j);
    want_bias.push_back(-std::log(binomial_tail(p, K, L, t) + 1e-4));
  }
  for (int j = end; j < length; ++j) want.push_back(j), want_bias.push_back(0);
  ASSERT_EQ(indices, want);
  ASSERT_EQ(bias.size(), want_bias.size());
  for (size_t n = 0; n < bias.size(); ++n) EXPECT_NEAR(bias[n], want_bias[n], 1e-4) << want[n];
  EXPECT_GT(want.size(), static_cast<size_t>(begin + length - end + 1)) << "some keys sampled";
  const size_t planted = std::find(indices.begin(), indices.end(), 100) - indices.begin();
  ASSERT_LT(planted, indices.size());
  EXPECT_NEAR(bias[planted], -std::log(1.0 + 1e-4), 1e-6);
}

// K = 0: every code is 0, every hashed key collides everywhere with u = 1; no middle at all: the
// exact entries alone.
TEST(LshSampling, NoBitsSampleEverythingAndNoMiddleKeepsTheExactEntries) {
  std::mt19937 rng(10);
  const int d = 8, L = 3, length = 20;
  const std::vector<float> keys = random_vector(rng, static_cast<size_t>(length) * d, 1.0f);
  const std::vector<float> q = random_vector(rng, d, 1.0f);
  const LshTables tables{nullptr, 0, L, d};
  const Hashed h = hash_middle(tables, keys, 2, 15, lsh_key_mean(keys.data(), 2, 15, d), q);
  EXPECT_EQ(h.codes, std::vector<uint16_t>(h.codes.size(), 0));
  EXPECT_EQ(h.query_codes, std::vector<uint16_t>(L, 0));
  const auto [indices, bias] = sample(tables, 2, keys, 2, 15, length, h, q);
  ASSERT_EQ(indices.size(), static_cast<size_t>(length));
  for (int j = 0; j < length; ++j) {
    EXPECT_EQ(indices[j], j);
    const bool middle = j >= 2 && j < 15;
    EXPECT_FLOAT_EQ(bias[j], middle ? static_cast<float>(-std::log(1.0 + 1e-4)) : 0.0f) << j;
  }
  const Sampled exact =
      sample(tables, 2, keys, 4, 4, length, hash_middle(tables, keys, 4, 4, h.mean, q), q);
  EXPECT_EQ(exact.indices.size(), static_cast<size_t>(length));
  EXPECT_EQ(exact.bias, std::vector<float>(length, 0.0f));
}

}  // namespace
}  // namespace kvb::kernels
