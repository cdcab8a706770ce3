// The backend-ops rows of the forward pass's data ops (kernels/cuda/transformer_ops.h; the table:
// tests/cuda/backend_ops_test.cc): embedding_gather, append_kv, rope_append_kv_decode,
// advance_lengths, copy_rows and fill_random_bf16, each against its CPU twin of the same name
// (kernels/cpu/transformer_ops.h). Exact but for the rotation: gathers and appends move bf16 values
// unchanged, integers add, and the generator's bits are a function of (seed, index) that the twin
// computes too. rope_append_kv_decode's rotated Q and K heads are rounded once to bf16 on the
// device, as apply_rope's rows are (1.6e-2 on values below 4; its V heads and lengths are exact).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/cpu/transformer_ops.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/backend_ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

// Ids with repeats, the table's first row (id 0) and its last.
inline void check_embedding_gather(int n, int d_model, int vocab) {
  const auto table = random_bf16_values(size_t(vocab) * d_model, 51);
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = int32_t((int64_t(i) * 7919) % vocab);
  ids.back() = vocab - 1;
  std::vector<float> expected(size_t(n) * d_model);
  kernels::embedding_gather(table.data(), ids.data(), n, d_model, expected.data());
  auto d_table = to_device_bf16(table);
  auto d_ids = to_device(ids);
  cuda::DeviceBuffer d_residual(expected.size() * 4, "residual");
  cuda::embedding_gather(d_table.as<__nv_bfloat16>(), d_ids.as<int32_t>(), n, d_model,
                         d_residual.as<float>(), nullptr);
  EXPECT_EQ(from_device<float>(d_residual, expected.size()), expected);
}

// A cache of `slots` heads of `capacity` rows, zero where nothing is written: slot i at offset
// (slots - 1 - i) * capacity (heads not in buffer order) with length (i * 5) % capacity_spare.
struct CacheLayout {
  int slots, capacity, head_dim;
  std::vector<int64_t> offsets;
  std::vector<int32_t> lengths;
  size_t elements() const { return size_t(slots) * capacity * head_dim; }
};
inline CacheLayout cache_layout(int slots, int rows_per_slot, int head_dim) {
  constexpr int kSpare = 17;  // lengths 0 to 16 before the rows appended
  CacheLayout c{slots, rows_per_slot + kSpare, head_dim, {}, {}};
  for (int i = 0; i < slots; ++i) {
    c.offsets.push_back(int64_t(slots - 1 - i) * c.capacity);
    c.lengths.push_back((i * 5) % kSpare);
  }
  return c;
}

struct AppendShape {
  int n, rows_per_seq, n_query_heads, n_kv_heads, head_dim;
  bool misaligned;  // qkv one bf16 value past a 16-byte boundary: the one-value path
};

inline void check_append_kv(const AppendShape& s) {
  const int d = s.head_dim, width = (s.n_query_heads + 2 * s.n_kv_heads) * d;
  const CacheLayout cache = cache_layout(s.n / s.rows_per_seq * s.n_kv_heads, s.rows_per_seq, d);
  const size_t shift = s.misaligned ? 1 : 0;
  const auto qkv = random_bf16_values(size_t(s.n) * width + shift, 52);
  std::vector<float> want_k(cache.elements(), 0.f), want_v = want_k;
  kernels::append_kv(qkv.data() + shift, s.n, s.rows_per_seq, s.n_query_heads, s.n_kv_heads, d,
                     cache.offsets.data(), cache.lengths.data(), want_k.data(), want_v.data());
  auto d_qkv = to_device_bf16(qkv);
  auto d_offsets = to_device(cache.offsets);
  auto d_lengths = to_device(cache.lengths);
  auto d_k = to_device_bf16(std::vector<float>(cache.elements(), 0.f));
  auto d_v = to_device_bf16(std::vector<float>(cache.elements(), 0.f));
  cuda::append_kv(d_qkv.as<__nv_bfloat16>() + shift, s.n, s.rows_per_seq, s.n_query_heads,
                  s.n_kv_heads, d, d_offsets.as<int64_t>(), d_lengths.as<int32_t>(),
                  d_k.as<__nv_bfloat16>(), d_v.as<__nv_bfloat16>(), nullptr);
  EXPECT_EQ(from_device_bf16(d_k, want_k.size()), want_k);
  EXPECT_EQ(from_device_bf16(d_v, want_v.size()), want_v);
  EXPECT_EQ(from_device<int32_t>(d_lengths, cache.lengths.size()), cache.lengths)
      << "append_kv reads the lengths; advance_lengths advances them";
}

struct RopeAppendShape {
  int batch, n_query_heads, n_kv_heads, head_dim;
  bool interleaved, bias;
};

// One decode row per sequence at positions from 0 to 131,000. The twin gets the row the device
// rotates: the bias added and rounded to bf16 (apply_rope's bias is the caller's on the CPU).
inline void check_rope_append_kv_decode(const RopeAppendShape& s) {
  const int d = s.head_dim, width = (s.n_query_heads + 2 * s.n_kv_heads) * d;
  const CacheLayout cache = cache_layout(s.batch * s.n_kv_heads, 1, d);
  const std::vector<int32_t> some_positions = {3, 131000, 0, 4095, 30000};
  std::vector<int32_t> positions;
  for (int b = 0; b < s.batch; ++b) positions.push_back(some_positions[b % 5]);
  const auto qkv = random_bf16_values(size_t(s.batch) * width, 53);
  const auto bias = random_bf16_values(width, 54);
  const auto freq = kernels::rope_inverse_frequencies(d, 10000.f);
  std::vector<float> rows = qkv;
  if (s.bias)
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = round_bf16(rows[i] + bias[i % width]);
  std::vector<float> want_k(cache.elements(), 0.f), want_v = want_k;
  std::vector<int32_t> want_lengths = cache.lengths;
  kernels::rope_append_kv_decode({.qkv = rows.data(),
                                  .positions = positions.data(),
                                  .inv_freq = freq.data(),
                                  .n = s.batch,
                                  .n_query_heads = s.n_query_heads,
                                  .n_kv_heads = s.n_kv_heads,
                                  .head_dim = d,
                                  .pairing = s.interleaved ? kernels::RopePairing::kInterleavedPairs
                                                           : kernels::RopePairing::kHalves},
                                 cache.offsets.data(), want_lengths.data(), want_k.data(),
                                 want_v.data());
  auto d_qkv = to_device_bf16(qkv), d_bias = to_device_bf16(bias);
  auto d_positions = to_device(positions);
  auto d_freq = to_device(freq);
  auto d_offsets = to_device(cache.offsets);
  auto d_lengths = to_device(cache.lengths);
  auto d_k = to_device_bf16(std::vector<float>(cache.elements(), 0.f));
  auto d_v = to_device_bf16(std::vector<float>(cache.elements(), 0.f));
  cuda::rope_append_kv_decode({.qkv = d_qkv.as<__nv_bfloat16>(),
                               .bias = s.bias ? d_bias.as<__nv_bfloat16>() : nullptr,
                               .positions = d_positions.as<int32_t>(),
                               .inv_freq = d_freq.as<float>(),
                               .n = s.batch,
                               .n_query_heads = s.n_query_heads,
                               .n_kv_heads = s.n_kv_heads,
                               .head_dim = d,
                               .interleaved = s.interleaved},
                              d_offsets.as<int64_t>(), d_lengths.as<int32_t>(),
                              d_k.as<__nv_bfloat16>(), d_v.as<__nv_bfloat16>(), nullptr);
  EXPECT_EQ(from_device<int32_t>(d_lengths, want_lengths.size()), want_lengths);
  EXPECT_LT(max_abs_diff(from_device_bf16(d_qkv, rows.size()), rows), 1.6e-2) << "rows";
  EXPECT_LT(max_abs_diff(from_device_bf16(d_k, want_k.size()), want_k), 1.6e-2) << "K cache";
  EXPECT_EQ(from_device_bf16(d_v, want_v.size()), want_v) << "V cache";
}

// Lengths and positions of different counts (either may be none, as the engine's calls have it).
inline void check_advance_lengths(int count, int n_positions, int delta) {
  std::vector<int32_t> lengths(std::max(count, 1)), positions(std::max(n_positions, 1));
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = int32_t(i * 3);
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = int32_t(1000 + i);
  std::vector<int32_t> want_lengths = lengths, want_positions = positions;
  kernels::advance_lengths(want_lengths.data(), count, want_positions.data(), n_positions, delta);
  auto d_lengths = to_device(lengths), d_positions = to_device(positions);
  cuda::advance_lengths(count > 0 ? d_lengths.as<int32_t>() : nullptr, count,
                        n_positions > 0 ? d_positions.as<int32_t>() : nullptr, n_positions, delta,
                        nullptr);
  cuda::check(cudaDeviceSynchronize(), "advance_lengths");
  EXPECT_EQ(from_device<int32_t>(d_lengths, lengths.size()), want_lengths);
  EXPECT_EQ(from_device<int32_t>(d_positions, positions.size()), want_positions);
}

struct CopyRowsShape {
  int n_rows, row_elems;
  bool misaligned;  // both buffers one bf16 value past a 16-byte boundary: the one-value path
};

// Source rows spread over a larger buffer (some read twice), destinations in reverse order, and
// rows that are no destination left as they were.
inline void check_copy_rows(const CopyRowsShape& s) {
  const int64_t src_count = s.n_rows + 7, dst_count = s.n_rows + 3;
  const size_t shift = s.misaligned ? 1 : 0;
  const auto src = random_bf16_values(size_t(src_count) * s.row_elems + shift, 55);
  std::vector<int64_t> from(s.n_rows), to(s.n_rows);
  for (int64_t i = 0; i < s.n_rows; ++i) {
    from[i] = (i * 5 + 3) % src_count;
    to[i] = dst_count - 1 - i;
  }
  std::vector<float> want(size_t(dst_count) * s.row_elems + shift, 0.f);
  kernels::copy_rows(src.data() + shift, want.data() + shift, from.data(), to.data(), s.n_rows,
                     s.row_elems);
  auto d_src = to_device_bf16(src), d_dst = to_device_bf16(std::vector<float>(want.size(), 0.f));
  auto d_from = to_device(from), d_to = to_device(to);
  cuda::copy_rows(d_src.as<__nv_bfloat16>() + shift, d_dst.as<__nv_bfloat16>() + shift,
                  d_from.as<int64_t>(), d_to.as<int64_t>(), s.n_rows, s.row_elems, nullptr);
  cuda::check(cudaDeviceSynchronize(), "copy_rows");
  EXPECT_EQ(from_device_bf16(d_dst, want.size()), want);
}

// The bf16 bit patterns, exactly: (2u - 1) is exact in f32 for u of 24 bits, so the one product
// by `scale` and the round to nearest even are the same on both twins. Equal to the deterministic
// twin, the device is deterministic per seed too.
inline void check_fill_random_bf16(size_t count, uint64_t seed, float scale) {
  std::vector<uint16_t> want(count);
  kernels::fill_random_bf16(want.data(), count, seed, scale);
  cuda::DeviceBuffer d_out(count * 2, "random");
  cuda::fill_random_bf16(d_out.as<__nv_bfloat16>(), count, seed, scale, nullptr);
  cuda::check(cudaDeviceSynchronize(), "fill_random_bf16");
  EXPECT_EQ(from_device<uint16_t>(d_out, count), want);
}

inline std::vector<OpCase> forward_data_cases() {
  std::vector<OpCase> cases;
  // One row, a prefill chunk, rows of 4,100 (past the block's 256 threads); vocabularies of 100
  // and SmolLM2's.
  struct GatherShape {
    int n, d_model, vocab;
  };
  for (const GatherShape s : {GatherShape{1, 576, 49152}, GatherShape{37, 896, 1000},
                              GatherShape{5, 4100, 100}, GatherShape{300, 64, 49152}})
    cases.push_back({case_name("embedding_gather_n", s.n, "_d", s.d_model, "_vocab", s.vocab),
                     [s] { check_embedding_gather(s.n, s.d_model, s.vocab); }});
  // Prefill chunks (one sequence, rows_per_seq = n), batched decode steps (one row each), two
  // sequences of three rows; head_dim 12 and misaligned rows take the one-value path.
  for (const AppendShape& s :
       {AppendShape{37, 37, 4, 2, 128, false}, AppendShape{300, 300, 14, 2, 64, false},
        AppendShape{1, 1, 9, 3, 64, false}, AppendShape{5, 1, 32, 8, 128, false},
        AppendShape{3, 1, 4, 2, 12, false}, AppendShape{6, 3, 4, 2, 16, false},
        AppendShape{4, 1, 32, 8, 128, true}, AppendShape{20, 20, 4, 2, 64, true}})
    cases.push_back(
        {case_name("append_kv_n", s.n, "_per_seq", s.rows_per_seq, "_hq", s.n_query_heads, "_hkv",
                   s.n_kv_heads, "_d", s.head_dim, s.misaligned ? "_misaligned" : ""),
         [=] { check_append_kv(s); }});
  // The models' head shapes at batch 1 and more, both pairings, with and without a bias; head_dim
  // 12 takes the one-value append.
  for (const RopeAppendShape& s :
       {RopeAppendShape{1, 9, 3, 64, false, false}, RopeAppendShape{1, 14, 2, 64, false, true},
        RopeAppendShape{5, 32, 8, 128, false, false}, RopeAppendShape{3, 28, 4, 128, false, true},
        RopeAppendShape{4, 32, 8, 128, true, false}, RopeAppendShape{2, 4, 2, 16, true, false},
        RopeAppendShape{3, 4, 2, 12, false, true}})
    cases.push_back({case_name("rope_append_kv_decode_batch", s.batch, "_hq", s.n_query_heads,
                               "_hkv", s.n_kv_heads, "_d", s.head_dim,
                               s.interleaved ? "_interleaved" : "_halves", s.bias ? "_bias" : ""),
                     [=] { check_rope_append_kv_decode(s); }});
  // A prefill's advance by its rows, a decode step's positions alone, both, and counts past one
  // block with a negative delta.
  struct AdvanceShape {
    int count, n_positions, delta;
  };
  for (const AdvanceShape s :
       {AdvanceShape{2, 0, 300}, AdvanceShape{0, 16, 1}, AdvanceShape{16, 4, 1},
        AdvanceShape{1, 1, 1}, AdvanceShape{300, 70000, -2}})
    cases.push_back({case_name("advance_lengths_count", s.count, "_positions", s.n_positions,
                               "_delta", s.delta < 0 ? "minus" : "", std::abs(s.delta)),
                     [s] { check_advance_lengths(s.count, s.n_positions, s.delta); }});
  // Rows of a head (64, 128), rows not a multiple of the 16-byte chunk (12, 1, 1001), many rows,
  // misaligned buffers.
  for (const CopyRowsShape& s :
       {CopyRowsShape{1, 64, false}, CopyRowsShape{37, 128, false}, CopyRowsShape{5000, 64, false},
        CopyRowsShape{3, 12, false}, CopyRowsShape{10, 1, false}, CopyRowsShape{100, 1001, false},
        CopyRowsShape{7, 128, true}})
    cases.push_back({case_name("copy_rows_n", s.n_rows, "_elems", s.row_elems,
                               s.misaligned ? "_misaligned" : ""),
                     [=] { check_copy_rows(s); }});
  // One value, counts off the block size, more than the grid's 65,535 blocks of 256 cover (the
  // loop wraps); seeds whose product with the multiplier wraps; the presets' scales.
  struct RandomShape {
    size_t count;
    uint64_t seed;
    float scale;
  };
  for (const RandomShape s : {RandomShape{1, 0, 1.f}, RandomShape{4097, 1, 0.02f},
                              RandomShape{1000, 0x9E3779B97F4A7C15ull, 1.7320508f},
                              RandomShape{size_t(65535) * 256 + 4099, 7919, 1.f}})
    cases.push_back({case_name("fill_random_bf16_count", s.count, "_seed", s.seed),
                     [s] { check_fill_random_bf16(s.count, s.seed, s.scale); }});
  return cases;
}

}  // namespace kvb::test
