// 16-bit KV rows (kernels/cpu/kv_rows.h) against independent truth: the rounding bound of each
// format, the scalar twin bit for bit, and decode attention over 16-bit rows against textbook
// double-precision attention on the rounded values.
#include "kernels/cpu/kv_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tests/kernels/random_vectors.h"

namespace kvb::kernels {
namespace {

struct Format {
  uint32_t type;
  const char* name;
  double relative_bound;  // half an ulp: 2^-11 for f16's 10-bit mantissa, 2^-8 for bf16's 7
  double smallest_normal;
  double largest;
};
const Format kFormats[] = {{kKvF16, "f16", std::ldexp(1.0, -11), 6.103515625e-05, 65504.0},
                           {kKvBf16, "bf16", std::ldexp(1.0, -8), 1.1754943508222875e-38, 3.0e38}};

std::vector<uint8_t> encoded(uint32_t type, const std::vector<float>& x, DotPath path) {
  std::vector<uint8_t> bytes(x.size() * kv_element_bytes(type));
  encode_kv_rows(type, x.data(), bytes.data(), static_cast<int64_t>(x.size()), path);
  return bytes;
}

std::vector<float> decoded(uint32_t type, const std::vector<uint8_t>& bytes, DotPath path) {
  std::vector<float> x(bytes.size() / kv_element_bytes(type));
  decode_kv_rows(type, bytes.data(), x.data(), static_cast<int64_t>(x.size()), path);
  return x;
}

// Magnitudes over the whole normal range of f16, signs mixed; 203 values so that the SIMD paths
// have a tail.
std::vector<float> wide_range_values(std::mt19937& rng) {
  std::uniform_real_distribution<float> exponent(-13.5f, 15.5f), unit(-1.0f, 1.0f);
  std::vector<float> x(203);
  for (auto& v : x) v = std::copysign(std::exp2(exponent(rng)), unit(rng));
  return x;
}

TEST(KvRows, RoundTripStaysWithinHalfAnUlp) {
  std::mt19937 rng(11);
  const std::vector<float> x = wide_range_values(rng);
  for (const Format& f : kFormats)
    for (DotPath path : {DotPath::kScalar, DotPath::kAvx2}) {
      if (!dot_path_available(path)) continue;
      const std::vector<float> back = decoded(f.type, encoded(f.type, x, path), path);
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LE(std::abs(double(back[i]) - x[i]), f.relative_bound * std::abs(x[i]))
            << f.name << " x=" << x[i] << " got " << back[i];
      std::vector<float> rounded(x.size());
      round_kv_rows(f.type, x.data(), rounded.data(), static_cast<int64_t>(x.size()), path);
      EXPECT_EQ(rounded, back) << f.name;
    }
}

// A value exactly between two representable neighbours goes to the one with an even mantissa.
TEST(KvRows, TiesRoundToEven) {
  // f16 near 1: spacing 2^-10. 1 + 2^-11 ties between 1 and 1 + 2^-10 -> 1 (even);
  // 1 + 3·2^-11 ties between 1 + 2^-10 and 1 + 2^-9 -> 1 + 2^-9 (even).
  // bf16 near 1: spacing 2^-7, the same pattern one format over.
  struct Case {
    uint32_t type;
    float x, expected;
  };
  const Case cases[] = {
      {kKvF16, 1.0f + std::ldexp(1.0f, -11), 1.0f},
      {kKvF16, 1.0f + 3 * std::ldexp(1.0f, -11), 1.0f + std::ldexp(1.0f, -9)},
      {kKvBf16, 1.0f + std::ldexp(1.0f, -8), 1.0f},
      {kKvBf16, 1.0f + 3 * std::ldexp(1.0f, -8), 1.0f + std::ldexp(1.0f, -6)},
  };
  for (DotPath path : {DotPath::kScalar, DotPath::kAvx2}) {
    if (!dot_path_available(path)) continue;
    for (const Case& c : cases) {
      std::vector<float> x(9, c.x);  // 8 SIMD lanes and a scalar tail
      for (float back : decoded(c.type, encoded(c.type, x, path), path))
        EXPECT_EQ(back, c.expected) << "type " << c.type << " x " << c.x;
    }
  }
}

// The AVX2 path encodes and decodes exactly as the scalar twin, specials included.
TEST(KvRows, Avx2MatchesScalarBitForBit) {
  if (!dot_path_available(DotPath::kAvx2)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  std::mt19937 rng(12);
  std::vector<float> x = wide_range_values(rng);
  const float inf = std::numeric_limits<float>::infinity();
  for (float special : {0.0f, -0.0f, inf, -inf, 1e-7f, -3e-6f, 7e4f, 65519.0f, 65520.0f, 1e-30f})
    x.push_back(special);
  for (const Format& f : kFormats) {
    const auto scalar = encoded(f.type, x, DotPath::kScalar);
    EXPECT_EQ(encoded(f.type, x, DotPath::kAvx2), scalar) << f.name;
    EXPECT_EQ(decoded(f.type, scalar, DotPath::kAvx2), decoded(f.type, scalar, DotPath::kScalar))
        << f.name;
  }
  const std::vector<float> nan(11, std::numeric_limits<float>::quiet_NaN());
  for (const Format& f : kFormats)
    for (float back : decoded(f.type, encoded(f.type, nan, DotPath::kAvx2), DotPath::kScalar))
      EXPECT_TRUE(std::isnan(back)) << f.name;
}

TEST(KvRows, DotAndAxpyMatchDoubleOnTheRoundedRow) {
  std::mt19937 rng(13);
  for (const int n : {64, 67, 128}) {
    const auto row = test::random_vector(rng, n, 2.0f), x = test::random_vector(rng, n, 1.0f);
    for (const Format& f : kFormats)
      for (DotPath path : {DotPath::kScalar, DotPath::kAvx2}) {
        if (!dot_path_available(path)) continue;
        const auto bytes = encoded(f.type, row, path);
        const auto rounded = decoded(f.type, bytes, DotPath::kScalar);
        double dot = 0;
        for (int i = 0; i < n; ++i) dot += double(rounded[i]) * x[i];
        const KvRowOps ops = kv_row_ops(f.type, path);
        EXPECT_NEAR(ops.dot(bytes.data(), x.data(), n), dot, 1e-4) << f.name << " n " << n;
        std::vector<float> y = x;
        ops.axpy(0.75f, bytes.data(), y.data(), n);
        for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i] + 0.75 * rounded[i], 1e-6) << f.name;
      }
  }
}

// Softmax-weighted sum in double over the listed entries (all when `indices` is empty).
std::vector<double> textbook_attention(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, int d,
                                       const std::vector<int32_t>& indices,
                                       const std::vector<float>& bias,
                                       std::vector<double>& probabilities) {
  const int n = static_cast<int>(k.size()) / d;
  std::vector<int32_t> entries = indices;
  if (entries.empty())
    for (int j = 0; j < n; ++j) entries.push_back(j);
  std::vector<double> logits(entries.size());
  double top = -1e300, z = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    double s = 0;
    for (int t = 0; t < d; ++t) s += double(q[t]) * k[size_t(entries[i]) * d + t];
    logits[i] = s / std::sqrt(double(d)) + (bias.empty() ? 0.0 : bias[i]);
    top = std::max(top, logits[i]);
  }
  for (double& l : logits) z += (l = std::exp(l - top));
  std::vector<double> out(d, 0.0);
  probabilities.assign(n, 0.0);
  for (size_t i = 0; i < entries.size(); ++i) {
    probabilities[entries[i]] += logits[i] / z;
    for (int t = 0; t < d; ++t) out[t] += logits[i] / z * v[size_t(entries[i]) * d + t];
  }
  return out;
}

TEST(KvRows, DecodeAttentionOver16BitRowsIsF32AttentionOnRoundedRows) {
  std::mt19937 rng(14);
  const int n = 333, d = 64;
  const auto q = test::random_vector(rng, d, 1.0f),
             k = test::random_vector(rng, size_t(n) * d, 1.0f),
             v = test::random_vector(rng, size_t(n) * d, 1.0f);
  std::vector<int32_t> some;
  std::vector<float> bias;
  for (int j = n - 1; j >= 0; j -= 3) {
    some.push_back(j);
    bias.push_back(0.01f * static_cast<float>(j % 7));
  }
  for (const Format& f : kFormats) {
    const auto k16 = encoded(f.type, k, DotPath::kScalar),
               v16 = encoded(f.type, v, DotPath::kScalar);
    const auto k_rounded = decoded(f.type, k16, DotPath::kScalar),
               v_rounded = decoded(f.type, v16, DotPath::kScalar);
    for (const bool selected : {false, true}) {
      std::vector<float> out(d), probabilities(n);
      DecodeAttentionArgs args{.query = q.data(),
                               .keys = k16.data(),
                               .values = v16.data(),
                               .kv_type = f.type,
                               .n_entries = n,
                               .head_dim = d,
                               .output = out.data(),
                               .probabilities = probabilities.data()};
      if (selected) {
        args.indices = some.data();
        args.n_indices = static_cast<int>(some.size());
        args.logit_bias = bias.data();
      }
      decode_attention(args);
      std::vector<double> p;
      const auto expected =
          textbook_attention(q, k_rounded, v_rounded, d, selected ? some : std::vector<int32_t>{},
                             selected ? bias : std::vector<float>{}, p);
      for (int t = 0; t < d; ++t) EXPECT_NEAR(out[t], expected[t], 1e-5) << f.name;
      for (int j = 0; j < n; ++j) EXPECT_NEAR(probabilities[j], p[j], 1e-6) << f.name;
    }
  }
}

TEST(KvRows, RejectsAnotherType) {
  EXPECT_THROW(kv_element_bytes(2), std::invalid_argument);  // q4_0 is a weight format only
  EXPECT_FALSE(kv_type_supported(8));
}

}  // namespace
}  // namespace kvb::kernels
