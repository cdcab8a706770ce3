// kernels/cpu/fingerprint.h: the mix is SplitMix64's output function (its published outputs from
// seed 0), and the fingerprint of rows tells apart what a reused projection fit must not confuse.
#include "kernels/cpu/fingerprint.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace kvb::kernels {
namespace {

TEST(Fingerprint, MixIsSplitMix64sOutputFromSeedZero) {
  // SplitMix64 seeded with 0: the first three outputs (Vigna's reference splitmix64.c).
  EXPECT_EQ(fingerprint_mix(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(fingerprint_mix(0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(fingerprint_mix(2 * 0x9e3779b97f4a7c15ull), 0x06c45d188009454full);
}

std::vector<uint16_t> random_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> values(n);
  for (uint16_t& v : values) v = static_cast<uint16_t>(rng());
  return values;
}

TEST(Fingerprint, IsTheSumOfTheElementsTerms) {
  const std::vector<uint16_t> values = random_rows(1000, 1);
  uint64_t sum = 0;  // in reverse order: the value does not depend on it
  for (int64_t i = 999; i >= 0; --i) sum += fingerprint_term(i, values[i]);
  EXPECT_EQ(fingerprint_rows(values.data(), 1000), sum);
  EXPECT_EQ(fingerprint_rows(values.data(), 0), 0u);
}

TEST(Fingerprint, ChangesWithAnyBitPositionOrLength) {
  const std::vector<uint16_t> values = random_rows(4096, 2);
  const uint64_t base = fingerprint_rows(values.data(), 4096);
  EXPECT_EQ(fingerprint_rows(values.data(), 4096), base);
  for (const int64_t at : {int64_t{0}, int64_t{1}, int64_t{2047}, int64_t{4095}})
    for (int bit = 0; bit < 16; ++bit) {
      std::vector<uint16_t> changed = values;
      changed[at] ^= uint16_t(1u << bit);
      EXPECT_NE(fingerprint_rows(changed.data(), 4096), base) << "element " << at << " bit " << bit;
    }
  std::vector<uint16_t> swapped = values;  // the same multiset of values, in another order
  std::swap(swapped[10], swapped[3000]);
  ASSERT_NE(swapped[10], swapped[3000]);
  EXPECT_NE(fingerprint_rows(swapped.data(), 4096), base);
  EXPECT_NE(fingerprint_rows(values.data(), 4095), base);
  const std::vector<uint16_t> zeros(4096, 0);  // a zero element still counts its position
  EXPECT_NE(fingerprint_rows(zeros.data(), 4096), fingerprint_rows(zeros.data(), 4095));
}

TEST(Fingerprint, CombineDependsOnOrder) {
  EXPECT_NE(fingerprint_combine(fingerprint_combine(0, 1), 2),
            fingerprint_combine(fingerprint_combine(0, 2), 1));
  EXPECT_NE(fingerprint_combine(0, 0), 0u);
}

}  // namespace
}  // namespace kvb::kernels
