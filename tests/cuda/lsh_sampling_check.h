// The backend-ops rows of LSH sampling (kernels/cuda/lsh_sampling.h) against its CPU twin
// (kernels/cpu/lsh_sampling.h), on bf16-representable keys and queries:
// - lsh_key_mean: within 1 f32 ulp (both sum the bf16 keys in f64, in different orders);
// - lsh_hash_keys, lsh_hash_queries: the same codes, bit for bit (a product near zero is decided in
//   f64 on both), centred norms within 1e-6 relative;
// - lsh_sample_lists: the same lists, in the same order, with the CPU's mean, codes and norms as
//   input; biases within 1e-5 (the same f64 sums; the device's acos/pow/log differ from libm by
//   an ulp or two).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/lsh_sampling.h"
#include "kernels/cuda/lsh_sampling.h"
#include "tests/cuda/backend_ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

struct LshShape {
  int batch, hq, hkv, d, K, L, min_collisions, prompt, decoded;
};

// Keys [B * Hkv, length, d] (bf16 values with a per-dimension offset to centre away), rows per
// KV head [Hkv, K * L, d] shared by the batch, queries [B, Hq, d].
struct LshInputs {
  LshShape s;
  int length, begin, end, n;
  std::vector<float> keys, rows, q;
  cuda::DeviceBuffer d_keys, d_rows, d_pointers, d_q;

  explicit LshInputs(const LshShape& shape) : s(shape) {
    length = s.prompt + s.decoded;
    begin = std::min(4, s.prompt);
    end = std::max(begin, s.prompt - 16);
    n = end - begin;
    keys = random_bf16_values(size_t(s.batch) * s.hkv * length * s.d, 51, 2.0f);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = round_bf16(keys[i] + 0.125f * (i % 7));
    rows = random_bf16_values(std::max<size_t>(size_t(s.hkv) * s.K * s.L * s.d, 1), 52, 1.0f);
    q = random_bf16_values(size_t(s.batch) * s.hq * s.d, 53, 3.0f);
    d_keys = to_device_bf16(keys);
    d_rows = to_device(rows);
    std::vector<const float*> pointers(size_t(s.batch) * s.hkv);
    for (size_t slot = 0; slot < pointers.size(); ++slot)
      pointers[slot] = d_rows.as<float>() + int64_t(slot % s.hkv) * s.K * s.L * s.d;
    d_pointers = to_device(pointers);
    d_q = to_device_bf16(q);
  }
  int slots() const { return s.batch * s.hkv; }
  const float* slot_keys(int slot) const { return keys.data() + int64_t(slot) * length * s.d; }
  kernels::LshTables tables(int slot) const {
    return {rows.data() + int64_t(slot % s.hkv) * s.K * s.L * s.d, s.K, s.L, s.d};
  }
};

// Means, codes and norms of the middle keys on the device and on the CPU; returns the CPU's.
struct HashedKeys {
  std::vector<float> mean, norms;
  std::vector<uint16_t> codes;  // [slots, L, n]
};

inline HashedKeys check_lsh_hash_keys(const LshInputs& in) {
  const LshShape& s = in.s;
  const int slots = in.slots();
  HashedKeys cpu{std::vector<float>(size_t(slots) * s.d),
                 std::vector<float>(std::max<size_t>(size_t(slots) * in.n, 1)),
                 std::vector<uint16_t>(std::max<size_t>(size_t(slots) * s.L * in.n, 1))};
  for (int slot = 0; slot < slots; ++slot) {
    const std::vector<float> mean =
        kernels::lsh_key_mean(in.slot_keys(slot), in.begin, in.end, s.d);
    std::copy(mean.begin(), mean.end(), cpu.mean.begin() + int64_t(slot) * s.d);
    kernels::lsh_hash_keys(in.tables(slot), in.slot_keys(slot), in.begin, in.end, mean.data(),
                           cpu.codes.data() + int64_t(slot) * s.L * in.n, in.n,
                           cpu.norms.data() + int64_t(slot) * in.n);
  }
  cuda::DeviceBuffer d_mean(cpu.mean.size() * 4), d_codes(cpu.codes.size() * 2),
      d_norms(cpu.norms.size() * 4);
  cuda::lsh_key_mean({.keys = in.d_keys.as<__nv_bfloat16>(),
                      .key_slot_stride = int64_t(in.length) * s.d,
                      .n_slots = slots,
                      .head_dim = s.d,
                      .begin = in.begin,
                      .end = in.end,
                      .mean = d_mean.as<float>()},
                     nullptr);
  const std::vector<float> mean = from_device<float>(d_mean, cpu.mean.size());
  int far = 0;
  for (size_t i = 0; i < mean.size(); ++i)
    far += std::abs(mean[i] - cpu.mean[i]) > 1.2e-7f * std::abs(cpu.mean[i]);
  EXPECT_EQ(far, 0) << "of " << mean.size() << " mean values beyond 1 ulp";
  auto d_cpu_mean = to_device(cpu.mean);  // hash around the CPU's mean: codes must then be equal
  cuda::lsh_hash_keys({.projections = in.d_pointers.as<const float*>(),
                       .bits_per_table = s.K,
                       .tables = s.L,
                       .keys = in.d_keys.as<__nv_bfloat16>(),
                       .key_slot_stride = int64_t(in.length) * s.d,
                       .mean = d_cpu_mean.as<float>(),
                       .n_slots = slots,
                       .head_dim = s.d,
                       .begin = in.begin,
                       .end = in.end,
                       .codes = d_codes.as<uint16_t>(),
                       .code_slot_stride = int64_t(s.L) * in.n,
                       .code_table_stride = in.n,
                       .centred_norms = d_norms.as<float>(),
                       .norm_slot_stride = in.n},
                      nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  const auto codes = from_device<uint16_t>(d_codes, cpu.codes.size());
  const auto norms = from_device<float>(d_norms, cpu.norms.size());
  int mismatches = 0;
  for (size_t i = 0; i < size_t(slots) * s.L * in.n; ++i) mismatches += codes[i] != cpu.codes[i];
  EXPECT_EQ(mismatches, 0) << "of " << size_t(slots) * s.L * in.n << " codes";
  int far_norms = 0;
  for (size_t i = 0; i < size_t(slots) * in.n; ++i)
    far_norms += std::abs(norms[i] - cpu.norms[i]) > 1e-6f * cpu.norms[i];
  EXPECT_EQ(far_norms, 0) << "centred norms beyond 1e-6 relative";
  return cpu;
}

inline std::vector<uint16_t> check_lsh_hash_queries(const LshInputs& in) {
  const LshShape& s = in.s;
  const int group = s.hq / s.hkv;
  std::vector<uint16_t> cpu(size_t(s.batch) * s.hq * s.L);
  for (int b = 0; b < s.batch; ++b)
    for (int a = 0; a < s.hq; ++a)
      kernels::lsh_hash_queries(in.tables(b * s.hkv + a / group),
                                in.q.data() + (int64_t(b) * s.hq + a) * s.d, 1,
                                cpu.data() + (int64_t(b) * s.hq + a) * s.L);
  cuda::DeviceBuffer d_codes(cpu.size() * 2);
  cuda::lsh_hash_queries({.projections = in.d_pointers.as<const float*>(),
                          .bits_per_table = s.K,
                          .tables = s.L,
                          .q = in.d_q.as<__nv_bfloat16>(),
                          .q_seq_stride = int64_t(s.hq) * s.d,
                          .batch = s.batch,
                          .n_query_heads = s.hq,
                          .n_kv_heads = s.hkv,
                          .head_dim = s.d,
                          .codes = d_codes.as<uint16_t>()},
                         nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  EXPECT_EQ(from_device<uint16_t>(d_codes, cpu.size()), cpu);
  return cpu;
}

// The whole chain: each head's list against lsh_sample_lists on the CPU's hashed keys. The lengths
// of the slots differ (slot s holds prompt + decoded - s % 2 entries) and the lists sit in room
// for every entry plus 3.
inline void check_lsh_sample_lists(const LshShape& s) {
  const LshInputs in(s);
  const HashedKeys hashed = check_lsh_hash_keys(in);
  const std::vector<uint16_t> query_codes = check_lsh_hash_queries(in);
  const int slots = in.slots(), group = s.hq / s.hkv, heads = s.batch * s.hq;
  const int64_t stride = in.length + 3;
  std::vector<int32_t> lengths(slots);
  for (int slot = 0; slot < slots; ++slot) lengths[slot] = in.length - slot % 2;
  auto d_lengths = to_device(lengths);
  auto d_mean = to_device(hashed.mean);
  auto d_codes = to_device(hashed.codes);
  auto d_norms = to_device(hashed.norms);
  auto d_query_codes = to_device(query_codes);
  cuda::DeviceBuffer d_mask(std::max<size_t>(size_t(heads) * ((in.n + 31) / 32), 1) * 4),
      d_sampled(std::max<size_t>(size_t(heads) * in.n, 1) * 4), d_indices(heads * stride * 4),
      d_bias(heads * stride * 4), d_offset(heads * 8), d_count(heads * 4);
  cuda::lsh_sample_lists({.bits_per_table = s.K,
                          .tables = s.L,
                          .min_collisions = s.min_collisions,
                          .q = in.d_q.as<__nv_bfloat16>(),
                          .q_seq_stride = int64_t(s.hq) * s.d,
                          .query_codes = d_query_codes.as<uint16_t>(),
                          .keys = in.d_keys.as<__nv_bfloat16>(),
                          .key_slot_stride = int64_t(in.length) * s.d,
                          .lengths = d_lengths.as<int32_t>(),
                          .mean = d_mean.as<float>(),
                          .codes = d_codes.as<uint16_t>(),
                          .code_slot_stride = int64_t(s.L) * in.n,
                          .code_table_stride = in.n,
                          .centred_norms = d_norms.as<float>(),
                          .norm_slot_stride = in.n,
                          .begin = in.begin,
                          .end = in.end,
                          .batch = s.batch,
                          .n_query_heads = s.hq,
                          .n_kv_heads = s.hkv,
                          .head_dim = s.d,
                          .sampled_mask = d_mask.as<uint32_t>(),
                          .sampled_bias = d_sampled.as<float>(),
                          .indices = d_indices.as<int32_t>(),
                          .logit_bias = d_bias.as<float>(),
                          .index_stride = stride,
                          .index_offset = d_offset.as<int64_t>(),
                          .index_count = d_count.as<int32_t>()},
                         nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  const auto indices = from_device<int32_t>(d_indices, heads * stride);
  const auto bias = from_device<float>(d_bias, heads * stride);
  const auto offsets = from_device<int64_t>(d_offset, heads);
  const auto counts = from_device<int32_t>(d_count, heads);
  int sampled = 0;
  for (int head = 0; head < heads; ++head) {
    const int b = head / s.hq, a = head % s.hq, slot = b * s.hkv + a / group;
    std::vector<int32_t> want;
    std::vector<float> want_bias;
    kernels::lsh_sample_lists({.tables = in.tables(slot),
                               .min_collisions = s.min_collisions,
                               .keys = in.slot_keys(slot),
                               .middle_begin = in.begin,
                               .middle_end = in.end,
                               .length = lengths[slot],
                               .mean = hashed.mean.data() + int64_t(slot) * s.d,
                               .key_codes = hashed.codes.data() + int64_t(slot) * s.L * in.n,
                               .code_table_stride = in.n,
                               .centred_norms = hashed.norms.data() + int64_t(slot) * in.n,
                               .queries = in.q.data() + int64_t(head) * s.d,
                               .query_codes = query_codes.data() + int64_t(head) * s.L},
                              &want, &want_bias);
    sampled += static_cast<int>(want.size()) - (in.begin + lengths[slot] - in.end);
    EXPECT_EQ(offsets[head], head * stride);
    ASSERT_EQ(counts[head], static_cast<int>(want.size())) << "head " << head;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), indices.begin() + head * stride))
        << "head " << head;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(bias[head * stride + i], want_bias[i], 1e-5f) << "head " << head << " " << i;
  }
  if (in.n > 0 && s.K <= 4) {
    EXPECT_GT(sampled, 0) << "short codes sample some keys";
  }
}

inline std::vector<OpCase> lsh_sampling_cases() {
  std::vector<OpCase> cases;
  // MagicPIG's (10, 150) at both head dims and groups 1 / 3 / 4 / 8; short codes that sample a
  // good share; K = 0 (everything sampled); a prompt with no middle; a long prompt.
  for (const LshShape s :
       {LshShape{1, 32, 8, 128, 10, 150, 2, 2000, 5}, LshShape{2, 8, 2, 64, 10, 150, 2, 700, 3},
        LshShape{1, 9, 3, 64, 3, 12, 2, 517, 4}, LshShape{2, 4, 4, 128, 4, 20, 3, 300, 1},
        LshShape{1, 6, 2, 64, 0, 5, 2, 200, 2}, LshShape{1, 4, 2, 64, 8, 16, 2, 19, 3},
        LshShape{1, 16, 2, 128, 6, 40, 2, 33000, 2}})
    cases.push_back(
        {case_name("lsh_sampling_batch", s.batch, "_hq", s.hq, "_hkv", s.hkv, "_d", s.d, "_K", s.K,
                   "_L", s.L, "_t", s.min_collisions, "_prompt", s.prompt, "_decoded", s.decoded),
         [s] { check_lsh_sample_lists(s); }});
  return cases;
}

}  // namespace kvb::test
