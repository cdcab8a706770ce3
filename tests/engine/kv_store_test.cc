#include "engine/kv_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kvb {
namespace {

std::vector<float> filled(int n, float base) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), base);
  return v;
}

TEST(KvStore, AppendAndReadBackPerHead) {
  KvStore store(/*n_layers=*/2, /*n_kv_heads=*/3, /*head_dim=*/4);
  for (int t = 0; t < 40; ++t) {
    auto k = filled(12, 100.0f * t);
    auto v = filled(12, -100.0f * t);
    store.append(1, t, k.data(), v.data());
  }
  EXPECT_EQ(store.length(1, 2), 40);
  EXPECT_EQ(store.length(0, 0), 0);
  EXPECT_FLOAT_EQ(store.keys(1, 2)[39 * 4 + 1], 100.0f * 39 + 2 * 4 + 1);
  EXPECT_FLOAT_EQ(store.values(1, 0)[5 * 4], -500.0f);
  EXPECT_EQ(store.positions(1, 1)[17], 17);
}

TEST(KvStore, CompactionKeepsChosenEntriesAndShrinksMemory) {
  KvStore store(1, 2, 2);
  for (int t = 0; t < 10; ++t) {
    const float k[4] = {float(t), 0, float(t) + 0.5f, 0};
    const float v[4] = {0, float(t), 0, float(t) + 0.5f};
    store.append(0, t, k, v);
  }
  store.compact(0, {{1, 4, 9}, {0}}, /*spare_per_head=*/0);
  EXPECT_EQ(store.length(0, 0), 3);
  EXPECT_EQ(store.length(0, 1), 1);
  EXPECT_EQ(store.positions(0, 0)[1], 4);
  EXPECT_FLOAT_EQ(store.keys(0, 0)[2 * 2], 9.0f);
  EXPECT_FLOAT_EQ(store.values(0, 1)[1], 0.5f);
  EXPECT_EQ(store.entries(), 4);
  EXPECT_EQ(store.kv_bytes(), 4 * 2 * 2 * 4);
  EXPECT_EQ(store.allocated_bytes(), store.kv_bytes());
}

TEST(KvStore, CompactionRejectsUnsortedIndices) {
  KvStore store(1, 1, 1);
  const float x = 1;
  for (int t = 0; t < 4; ++t) store.append(0, t, &x, &x);
  EXPECT_THROW(store.compact(0, {{2, 1}}, 0), std::invalid_argument);
  EXPECT_THROW(store.compact(0, {{0, 4}}, 0), std::invalid_argument);
}

TEST(KvStore, EraseKeepsOrder) {
  KvStore store(1, 1, 1);
  for (int t = 0; t < 5; ++t) {
    const float x = float(t);
    store.append(0, t, &x, &x);
  }
  store.erase(0, 0, 1);
  ASSERT_EQ(store.length(0, 0), 4);
  EXPECT_EQ(store.positions(0, 0)[1], 2);
  EXPECT_FLOAT_EQ(store.keys(0, 0)[3], 4.0f);
}

// f16 keeps 11 significant bits and bf16 8: the values below need more, so each dtype's store
// must hold the rounded value (ties to even), and its accounting 2 bytes an element.
TEST(KvStore, SixteenBitStoreHoldsRoundedEntriesInTwoBytes) {
  const float x[2] = {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), -3.0f};
  const float f16[2] = {1.0f + std::ldexp(1.0f, -10), -3.0f};
  const float bf16[2] = {1.0f, -3.0f};
  for (const auto& [dtype, expected] :
       {std::pair{KvDtype::kF16, f16}, std::pair{KvDtype::kBf16, bf16}}) {
    KvStore store(1, 1, 2, dtype);
    EXPECT_FALSE(store.holds_f32());
    for (int t = 0; t < 20; ++t) store.append(0, t, x, x);  // past the first growth
    EXPECT_EQ(store.kv_bytes(), 20 * 2 * 2 * 2);
    EXPECT_THROW(store.keys(0, 0), std::logic_error);  // float readers take a widened copy
    const KvStore wide = store.widened();
    ASSERT_TRUE(wide.holds_f32());
    EXPECT_EQ(wide.kv_bytes(), 20 * 2 * 2 * 4);
    EXPECT_EQ(wide.keys(0, 0)[19 * 2], expected[0]);
    EXPECT_EQ(wide.values(0, 0)[19 * 2 + 1], expected[1]);

    // Compaction and eviction move 16-bit rows whole.
    store.compact(0, {{3, 19}}, 1);
    store.erase(0, 0, 0);
    store.append(0, 20, x, x);
    store.widen();  // in place; later appends are still rounded to the dtype
    store.append(0, 21, x, x);
    ASSERT_EQ(store.length(0, 0), 3);
    EXPECT_EQ(store.positions(0, 0)[0], 19);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(store.keys(0, 0)[j * 2], expected[0]) << j;
    EXPECT_EQ(store.kv_bytes(), 3 * 2 * 2 * 4);
  }
}

// append_rows is append_head row by row, in one copy: the same bytes, positions and lengths for
// every dtype, onto empty and non-empty heads, past the reserved capacity.
TEST(KvStore, AppendRowsEqualsAppendHeadRowByRow) {
  const int layers = 2, heads = 3, d = 5;
  const std::vector<float> rows = filled(300 * d, 0.37f);
  const std::vector<float> other = filled(300 * d, -11.1f);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16}) {
    KvStore by_row(layers, heads, d, dtype), at_once(layers, heads, d, dtype);
    by_row.reserve(20);
    at_once.reserve(20);
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h) {
        const int first = 7 * h + l, second = 40 + 60 * h;  // the second grows the head
        for (int t = 0; t < first + second; ++t)
          by_row.append_head(l, h, 3 + t, &rows[t * d], &other[t * d]);
        at_once.append_rows(l, h, 3, first, rows.data(), other.data());
        at_once.append_rows(l, h, 3 + first, second, &rows[first * d], &other[first * d]);
      }
    const size_t row_bytes = static_cast<size_t>(d) * (dtype == KvDtype::kF32 ? 4 : 2);
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h) {
        const int n = by_row.length(l, h);
        ASSERT_EQ(at_once.length(l, h), n);
        EXPECT_EQ(std::memcmp(at_once.key_rows(l, h), by_row.key_rows(l, h), n * row_bytes), 0);
        EXPECT_EQ(std::memcmp(at_once.value_rows(l, h), by_row.value_rows(l, h), n * row_bytes), 0);
        EXPECT_TRUE(std::equal(at_once.positions(l, h), at_once.positions(l, h) + n,
                               by_row.positions(l, h)));
      }
  }
}

// A keys-only store holds what a whole one holds of the keys, and no values.
TEST(KvStore, KeysOnlyStoreHoldsTheKeysAndNoValues) {
  const int d = 4;
  const std::vector<float> k = filled(50 * d, 1.0f), v = filled(50 * d, -1.0f);
  KvStore whole(2, 2, d);
  KvStore keys = KvStore::keys_only(2, 2, d);
  EXPECT_TRUE(whole.holds_values());
  EXPECT_FALSE(keys.holds_values());
  for (int h = 0; h < 2; ++h) {
    whole.append_rows(1, h, 0, 30, &k[h * d], &v[h * d]);
    keys.append_rows(1, h, 0, 30, &k[h * d], nullptr);
  }
  whole.append(1, 30, k.data(), v.data());
  keys.append(1, 30, k.data(), v.data());  // values dropped
  for (KvStore* store : {&whole, &keys}) {
    store->compact(1, {{0, 5, 30}, {2, 3, 4, 30}}, 2);
    store->erase(1, 1, 0);
  }
  for (int h = 0; h < 2; ++h) {
    ASSERT_EQ(keys.length(1, h), whole.length(1, h));
    EXPECT_TRUE(
        std::equal(keys.keys(1, h), keys.keys(1, h) + whole.length(1, h) * d, whole.keys(1, h)));
    EXPECT_TRUE(std::equal(keys.positions(1, h), keys.positions(1, h) + whole.length(1, h),
                           whole.positions(1, h)));
  }
  EXPECT_THROW(keys.values(1, 0), std::logic_error);
  EXPECT_THROW(keys.value_rows(1, 0), std::logic_error);
  EXPECT_THROW(keys.mutable_values(1, 0), std::logic_error);
  EXPECT_EQ(keys.kv_bytes(), whole.kv_bytes() / 2);
  EXPECT_THROW(whole.append_rows(0, 0, 0, 1, k.data(), nullptr), std::logic_error);
  keys.clear();
  EXPECT_FALSE(keys.holds_values());
}

TEST(KvStore, DtypeNamesRoundTrip) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16})
    EXPECT_EQ(parse_kv_dtype(kv_dtype_name(d)), d);
  EXPECT_FALSE(parse_kv_dtype("fp16").has_value());
  EXPECT_EQ(kv_dtype_bytes(KvDtype::kBf16), 2);
}

}  // namespace
}  // namespace kvb
