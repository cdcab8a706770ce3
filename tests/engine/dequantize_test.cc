// Dequantisation against two kinds of truth: blocks built by hand from the layouts in
// docs/engine.md §1 with values computed here element by element, and random blocks plus
// real model tensors decoded by the gguf PyPI package (tests/goldens/make_dequantize_goldens.py).
#include "kernels/cpu/dequantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "tests/engine/dequantize_goldens.h"

namespace kvb {
namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
                   kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30;

void put_half(std::vector<uint8_t>& b, size_t at, uint16_t h) {
  b[at] = h & 0xFF;
  b[at + 1] = h >> 8;
}

std::vector<float> decode(uint32_t type, const std::vector<uint8_t>& raw, int64_t n) {
  std::vector<float> out(n);
  dequantize(type, raw.data(), out.data(), n);
  return out;
}

TEST(DequantizeTest, HalfPrecisionConversions) {
  EXPECT_EQ(fp16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(fp16_to_f32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(fp16_to_f32(0xFC00)) && fp16_to_f32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(fp16_to_f32(0x8000)));
  // Every finite half survives f32 and back; halfway cases round to even.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;
    ASSERT_EQ(f32_to_fp16(fp16_to_f32(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(f32_to_fp16(70000.0f), 0x7C00);
  EXPECT_EQ(f32_to_fp16(1e-9f), 0x0000);
}

TEST(DequantizeTest, BFloat16Conversions) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

// The vectorised row rounding against the scalar conversion, bit for bit: random patterns (NaNs
// with every payload, infinities, subnormals among them) and the edges written out.
TEST(DequantizeTest, RowRoundingToBf16EqualsTheScalarConversion) {
  std::vector<uint32_t> bits = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001,
                                0xFF800001, 0x7FC00000, 0x7FBFFFFF, 0x7F7FFFFF, 0x7F7F8000,
                                0x3F808000, 0x3F818000, 0x00008000, 0x00018000, 0x0000FFFF,
                                0x80007FFF, 0x3F7FFFFF, 0x477FFFFF};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    bits.push_back(static_cast<uint32_t>(state >> 32));
  }
  std::vector<float> row(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) row[i] = std::bit_cast<float>(bits[i]);
  round_to_bf16(row.data(), static_cast<int64_t>(row.size()));
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t want = static_cast<uint32_t>(f32_to_bf16(std::bit_cast<float>(bits[i]))) << 16;
    ASSERT_EQ(std::bit_cast<uint32_t>(row[i]), want) << std::hex << "input 0x" << bits[i];
  }
}

TEST(DequantizeTest, PlainFloatTypes) {
  const std::vector<float> values = {1.5f, -0.25f, 3.0f, 0.0f};
  std::vector<uint8_t> f32(16), f16(8), bf16(8);
  std::memcpy(f32.data(), values.data(), 16);
  for (int i = 0; i < 4; ++i) {
    put_half(f16, 2 * i, f32_to_fp16(values[i]));
    put_half(bf16, 2 * i, f32_to_bf16(values[i]));
  }
  EXPECT_EQ(decode(kF32, f32, 4), values);
  EXPECT_EQ(decode(kF16, f16, 4), values);
  EXPECT_EQ(decode(kBF16, bf16, 4), values);
}

TEST(DequantizeTest, HandBuiltQ4_0AndQ4_1AndQ8_0) {
  // Q4_0: d = 0.5; byte j holds element j (low nibble) and element j + 16 (high nibble).
  std::vector<uint8_t> q4_0(18);
  put_half(q4_0, 0, 0x3800);  // 0.5
  for (int j = 0; j < 16; ++j) q4_0[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y0 = decode(kQ4_0, q4_0, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y0[j], (j - 8) * 0.5f);
    EXPECT_EQ(y0[j + 16], (15 - j - 8) * 0.5f);
  }
  // Q4_1: d = 2, m = -1.
  std::vector<uint8_t> q4_1(20);
  put_half(q4_1, 0, 0x4000);
  put_half(q4_1, 2, 0xBC00);
  for (int j = 0; j < 16; ++j) q4_1[4 + j] = static_cast<uint8_t>((j * 7) % 16 | (j << 4));
  const auto y1 = decode(kQ4_1, q4_1, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y1[j], ((j * 7) % 16) * 2.0f - 1.0f);
    EXPECT_EQ(y1[j + 16], j * 2.0f - 1.0f);
  }
  // Q8_0: d = 0.25, qs = -128..127 spread.
  std::vector<uint8_t> q8(34);
  put_half(q8, 0, 0x3400);
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  const auto y8 = decode(kQ8_0, q8, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y8[j], (j * 8 - 128) * 0.25f);
}

TEST(DequantizeTest, HandBuiltQ5_0AndQ5_1) {
  // Element j's fifth bit is bit j of the little-endian uint32 qh; qs is laid out as in Q4_0.
  const uint32_t qh = 0xA5C3F00Fu;
  std::vector<uint8_t> q5_0(22), q5_1(24);
  put_half(q5_0, 0, 0x3800);  // d = 0.5
  put_half(q5_1, 0, 0x4000);  // d = 2
  put_half(q5_1, 2, 0xBC00);  // m = -1
  for (int i = 0; i < 4; ++i) q5_0[2 + i] = q5_1[4 + i] = static_cast<uint8_t>(qh >> (8 * i));
  for (int j = 0; j < 16; ++j)
    q5_0[6 + j] = q5_1[8 + j] = static_cast<uint8_t>((j * 5) % 16 | ((15 - j) << 4));
  const auto y0 = decode(kQ5_0, q5_0, 32), y1 = decode(kQ5_1, q5_1, 32);
  for (int e = 0; e < 32; ++e) {
    const int nibble = e < 16 ? (e * 5) % 16 : 15 - (e - 16);
    const int q = nibble | static_cast<int>(((qh >> e) & 1) << 4);
    ASSERT_EQ(y0[e], (q - 16) * 0.5f) << "element " << e;
    ASSERT_EQ(y1[e], q * 2.0f - 1.0f) << "element " << e;
  }
}

// Q4_K, and Q5_K: the same with qh[32] before qs, element e of chunk c taking bit 2c (low nibble)
// or 2c + 1 (high nibble) of qh[e % 32] as its fifth bit. Sub-block scales and mins chosen to use
// the upper 2 of the 6 bits for sub-blocks 4-7.
TEST(DequantizeTest, HandBuiltQ4_KAndQ5_K) {
  const int sc[8] = {1, 5, 17, 63, 20, 33, 2, 48};
  const int mn[8] = {0, 3, 16, 40, 63, 1, 18, 7};
  for (const bool five_bits : {false, true}) {
    SCOPED_TRACE(five_bits ? "q5_K" : "q4_K");
    const int qs_at = five_bits ? 48 : 16;
    std::vector<uint8_t> b(five_bits ? 176 : 144, 0);
    put_half(b, 0, 0x3C00);  // d = 1
    put_half(b, 2, 0x3800);  // dmin = 0.5
    uint8_t* s = &b[4];
    for (int j = 0; j < 4; ++j) {
      s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
      s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
      s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
    for (int i = 0; five_bits && i < 32; ++i) b[16 + i] = static_cast<uint8_t>(i * 71 + 5);  // qh
    for (int i = 0; i < 128; ++i) b[qs_at + i] = static_cast<uint8_t>(i * 37 + 11);
    const auto y = decode(five_bits ? kQ5_K : kQ4_K, b, 256);
    for (int e = 0; e < 256; ++e) {
      const int chunk = e / 64, within = e % 64, sub = 2 * chunk + within / 32, l = within % 32;
      const uint8_t byte = b[qs_at + 32 * chunk + l];
      const int low = within < 32 ? (byte & 0xF) : (byte >> 4);
      const int high = five_bits ? (b[16 + l] >> sub) & 1 : 0;
      ASSERT_EQ(y[e], 1.0f * sc[sub] * (low | (high << 4)) - 0.5f * mn[sub]) << "element " << e;
    }
  }
}

TEST(DequantizeTest, HandBuiltQ6_K) {
  std::vector<uint8_t> b(210, 0);
  for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>(i * 29 + 3);       // ql
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>(i * 53 + 7);  // qh
  for (int i = 0; i < 16; ++i) b[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 9 - 70));
  put_half(b, 208, 0x3400);  // d = 0.25, stored last
  const auto y = decode(kQ6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const uint8_t ql = b[half * 64 + l + (k & 1) * 32];
    const int low = k < 2 ? (ql & 0xF) : (ql >> 4);
    const int high = (b[128 + half * 32 + l] >> (2 * k)) & 3;
    const int scale = static_cast<int8_t>(b[192 + half * 8 + l / 16 + 2 * k]);
    ASSERT_EQ(y[e], 0.25f * scale * ((low | (high << 4)) - 32)) << "element " << e;
  }
}

TEST(DequantizeTest, RejectsUnsupportedTypesAndPartialBlocks) {
  std::vector<uint8_t> raw(64);
  std::vector<float> out(64);
  EXPECT_THROW(dequantize(11 /*q3_K*/, raw.data(), out.data(), 32), std::invalid_argument);
  EXPECT_THROW(dequantize(kQ4_0, raw.data(), out.data(), 31), std::invalid_argument);
  EXPECT_FALSE(dequantize_supported(10 /*q2_K*/));
  EXPECT_TRUE(dequantize_supported(kQ6_K));
}

// Found by the GGUF fuzzer: a zero-element tensor reaches dequantize with null buffers.
TEST(DequantizeTest, EmptyTensorWithNullBuffersIsANoOp) {
  for (uint32_t type : {kF32, kF16, kBF16, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K})
    EXPECT_NO_THROW(dequantize(type, nullptr, nullptr, 0)) << "ggml type " << type;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

TEST(DequantizeTest, RandomBlocksMatchTheGgufPackage) {
  const auto goldens = test::load_dequantize_goldens();
  ASSERT_EQ(goldens["random_blocks"].size(), 8u);
  for (const auto& block : goldens["random_blocks"]) {
    SCOPED_TRACE(block["name"].get<std::string>());
    const auto raw = from_hex(block["hex"]);
    const auto expected = block["values"].get<std::vector<float>>();
    const auto y =
        decode(block["type"].get<uint32_t>(), raw, static_cast<int64_t>(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(y[i], expected[i], 1e-6f * std::max(1.0f, std::fabs(expected[i])))
          << "element " << i;
  }
}

TEST(DequantizeTest, DefaultModelTensorsMatchTheGgufPackage) {
  KVB_REQUIRE_FILE(test::default_model_path());
  test::expect_tensor_samples_match(test::default_model_path(),
                                    test::load_dequantize_goldens()["model_samples"]);
}

}  // namespace
}  // namespace kvb
