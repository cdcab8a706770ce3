// The backend-ops rows of the decode selectors' kernels (tests/cuda/backend_ops_test.cc):
// BinaryPC's hashing and scores (kernels/cuda/binary_hash.h), Quest's page bounds, scores and page
// expansion (kernels/cuda/page_bounds.h) and DropKV's pool_and_protect, each against its CPU twin
// (the shared top-k's rows: backend_ops_topk.h). All of them are exact: the same integers, the same
// bf16 minima and maxima, the same f32 sums in the same order, the same indices.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/binary_hash.h"
#include "kernels/cpu/dropkv_scores.h"
#include "kernels/cpu/fingerprint.h"
#include "kernels/cpu/page_bounds.h"
#include "kernels/cpu/topk_select.h"
#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/dropkv_scores.h"
#include "kernels/cuda/fingerprint.h"
#include "kernels/cuda/page_bounds.h"
#include "tests/cuda/backend_ops.h"
#include "tests/cuda/binary_hash_check.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/page_bounds_check.h"

namespace kvb::test {

// Codes bit-exact and reconstruction errors close (f32 norms of the same residual), over the
// prefill range and then the last tokens one at a time, as decode tokens arrive.
inline void check_binary_hash_keys(int slots, int length, int d) {
  const std::vector<float> keys = test_keys(slots, length, d, 3);
  const std::vector<float> projection = fitted_projections(keys, slots, length, d);
  std::vector<uint64_t> expected(size_t(slots) * length);
  std::vector<float> expected_error(expected.size());
  for (int s = 0; s < slots; ++s) {
    const float* rows = projection.data() + int64_t(s) * kBinaryHashBits * d;
    kernels::binary_hash_keys(rows, d, keys.data() + int64_t(s) * length * d, length,
                              expected.data() + int64_t(s) * length);
    for (int j = 0; j < length; ++j)
      expected_error[s * length + j] = kernels::binary_hash_reconstruction_error(
          rows, d, keys.data() + (int64_t(s) * length + j) * d, expected[s * length + j]);
  }
  auto d_keys = to_device_bf16(keys);
  auto d_projection = to_device(projection);
  cuda::DeviceBuffer d_codes(expected.size() * 8), d_error(expected.size() * 4);
  cuda::BinaryHashKeysArgs args{.projection = d_projection.as<float>(),
                                .keys = d_keys.as<__nv_bfloat16>(),
                                .key_slot_stride = int64_t(length) * d,
                                .n_slots = slots,
                                .head_dim = d,
                                .codes = d_codes.as<uint64_t>(),
                                .code_slot_stride = length,
                                .reconstruction_error = d_error.as<float>()};
  const int appended = std::min(5, length - 1);
  args.begin = 0;
  args.end = length - appended;
  cuda::binary_hash_keys(args, nullptr);
  for (int j = length - appended; j < length; ++j) {
    args.begin = j;
    args.end = j + 1;
    cuda::binary_hash_keys(args, nullptr);
  }
  cuda::check(cudaDeviceSynchronize(), "sync");
  const auto codes = from_device<uint64_t>(d_codes, expected.size());
  const auto errors = from_device<float>(d_error, expected.size());
  int mismatches = 0;
  for (size_t n = 0; n < codes.size(); ++n) mismatches += codes[n] != expected[n];
  EXPECT_EQ(mismatches, 0) << "of " << codes.size() << " codes";
  EXPECT_EQ(codes[0], 0u) << "a zero key projects to 0 everywhere: every bit is h = +1";
  for (size_t n = 0; n < errors.size(); ++n)
    ASSERT_NEAR(errors[n], expected_error[n], 1e-5f * (1.0f + expected_error[n])) << "token " << n;
}

// A device array of `slots` pointers, slot s at base + (slots - 1 - s) * stride: the slots stored
// in reverse order, so that a kernel reading one slot for another shows.
inline cuda::DeviceBuffer reversed_slot_pointers(const __nv_bfloat16* base, int slots,
                                                 int64_t stride) {
  std::vector<const __nv_bfloat16*> pointers(slots);
  for (int s = 0; s < slots; ++s) pointers[s] = base + (slots - 1 - s) * stride;
  cuda::DeviceBuffer device(pointers.size() * sizeof(void*));
  device.upload(pointers.data(), device.bytes());
  return device;
}

// The projection fit on the device against the CPU twin, bit for bit: every slot's rows equal
// (the same f64 sums in the same order), with the slots' keys at separate addresses and a few
// exactly-zero keys (sign 0 leaves a residual row as it is).
inline void check_binary_fit_projection(int slots, int length, int d, int iterations,
                                        bool recompute_signs) {
  const std::vector<float> keys = test_keys(slots, length, d, 11);
  std::vector<float> starts(size_t(slots) * kBinaryHashBits * d), expected(starts.size());
  for (int s = 0; s < slots; ++s) {
    const std::vector<float> one = kernels::binary_fit_starts(40 + s, d);
    std::copy(one.begin(), one.end(), starts.begin() + int64_t(s) * kBinaryHashBits * d);
    kernels::binary_fit_projection(keys.data() + int64_t(s) * length * d, length, d, one.data(),
                                   {.iterations = iterations, .recompute_signs = recompute_signs},
                                   expected.data() + int64_t(s) * kBinaryHashBits * d);
  }
  // Slot s's keys stored in reverse slot order with a gap, so that a slot read as another shows.
  const int64_t slot_stride = int64_t(length + 3) * d;
  std::vector<float> stored(size_t(slots) * slot_stride, 7.0f);
  for (int s = 0; s < slots; ++s)
    std::copy_n(keys.begin() + int64_t(s) * length * d, int64_t(length) * d,
                stored.begin() + (slots - 1 - s) * slot_stride);
  auto d_keys = to_device_bf16(stored);
  const cuda::DeviceBuffer d_pointers =
      reversed_slot_pointers(d_keys.as<__nv_bfloat16>(), slots, slot_stride);
  auto d_starts = to_device(starts);
  cuda::DeviceBuffer d_rows(expected.size() * 4),
      workspace(cuda::binary_fit_projection_workspace_bytes(slots, length, d));
  cuda::binary_fit_projection({.keys = d_pointers.as<const __nv_bfloat16*>(),
                               .n_slots = slots,
                               .head_dim = d,
                               .length = length,
                               .iterations = iterations,
                               .recompute_signs = recompute_signs,
                               .starts = d_starts.as<float>(),
                               .projection = d_rows.as<float>(),
                               .workspace = workspace.data()},
                              nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  const auto rows = from_device<float>(d_rows, expected.size());
  int mismatches = 0;
  for (size_t n = 0; n < rows.size(); ++n) mismatches += rows[n] != expected[n];
  EXPECT_EQ(mismatches, 0) << "of " << rows.size() << " projection values";
}

// The fingerprint of each slot's rows on the device against the CPU twin (equal integers), with
// the slots at separate addresses in reverse order so that a slot read as another shows.
inline void check_fingerprint_rows(int slots, int64_t per_slot) {
  std::mt19937 rng(17);
  const int64_t slot_stride = per_slot + 5;
  std::vector<uint16_t> stored(size_t(slots) * slot_stride);
  for (uint16_t& v : stored) v = static_cast<uint16_t>(rng());
  cuda::DeviceBuffer d_values(stored.size() * 2), d_out(size_t(slots) * 8);
  d_values.upload(stored.data(), d_values.bytes());
  const cuda::DeviceBuffer d_pointers =
      reversed_slot_pointers(d_values.as<__nv_bfloat16>(), slots, slot_stride);
  cuda::fingerprint_rows(d_pointers.as<const __nv_bfloat16*>(), slots, per_slot,
                         d_out.as<uint64_t>(), nullptr);
  cuda::check(cudaDeviceSynchronize(), "fingerprint_rows");
  const auto got = from_device<uint64_t>(d_out, slots);
  for (int s = 0; s < slots; ++s)
    EXPECT_EQ(got[s],
              kernels::fingerprint_rows(stored.data() + (slots - 1 - s) * slot_stride, per_slot))
        << "slot " << s;
}

// One backend row of binary_score_keys: `sinks` sinks in every slot, and (with `mask`) tokens 7,
// 100 and length - 1 of the last slot forced through the EAS mask. Codes hashed from keys with
// fitted projections (a few keys exactly zero); or, with `random`, random codes and projection
// rows (the scores' arithmetic does not depend on where they come from). With `gap` > 0 the device
// rows are longer than the slots (ScoreInputs: codes by gap, mask by a word, keys by gap + 2,
// queries by gap + 1), so that rows start at every alignment.
struct ScoreCase {
  int batch, hq, hkv, d, length;
  bool random = false;
  int sinks = 3;
  bool mask = true;
  int gap = 0;
};

// binary_score_keys (the queries packed in each block) against the CPU twin's pack + score.
inline void check_binary_score_keys(const ScoreCase& c) {
  const int slots = c.batch * c.hkv;
  ScoreInputs in{
      .batch = c.batch, .hq = c.hq, .hkv = c.hkv, .d = c.d, .length = c.length, .sinks = c.sinks};
  if (c.mask)
    for (const int token : {7, 100, c.length - 1})
      if (token < c.length) in.forced.push_back({slots - 1, token});
  if (c.gap > 0) {
    in.code_gap = c.gap;
    in.mask_gap = 1;
    in.key_gap = c.gap + 2;
    in.q_gap = c.gap + 1;
  }
  in.codes.resize(size_t(slots) * c.length);
  if (c.random) {
    std::mt19937_64 rng(41);
    for (uint64_t& code : in.codes) code = rng();
    in.projection = random_bf16_values(size_t(slots) * kBinaryHashBits * c.d, 42, 1.0f);
  } else {
    const std::vector<float> keys = test_keys(slots, c.length, c.d, 21);
    in.projection = fitted_projections(keys, slots, c.length, c.d);
    for (int s = 0; s < slots; ++s)
      kernels::binary_hash_keys(in.projection.data() + int64_t(s) * kBinaryHashBits * c.d, c.d,
                                keys.data() + int64_t(s) * c.length * c.d, c.length,
                                in.codes.data() + int64_t(s) * c.length);
  }
  in.q = random_bf16_values(size_t(c.batch) * c.hq * c.d, 22, 2.0f);
  expect_score_keys_equal(in);
}

struct PageShape {
  int n_query_heads, n_kv_heads, head_dim, prompt, decoded;
};

// update_page_bounds over the prompt, then token by token; page_bound_scores per query head and
// shared over the group with the last page kept; expand_pages of each list's top pages. Against
// the CPU twins for every KV head.
inline void check_page_bounds(const PageShape& s) {
  const int hq = s.n_query_heads, hkv = s.n_kv_heads, d = s.head_dim, group = hq / hkv;
  const int length = s.prompt + s.decoded, page = 16, n_pages = (length + page - 1) / page;
  const std::vector<float> keys = random_bf16_values(size_t(hkv) * length * d, 41, 2.0f);
  auto d_keys = to_device_bf16(keys);
  DevicePages pages(d_keys, hkv, length, d, page);
  pages.add(0, s.prompt);
  for (int j = s.prompt; j < length; ++j) pages.add(j, j + 1);
  const std::vector<float> q = random_bf16_values(size_t(hq) * d, 42, 2.0f);
  const std::vector<float> per_head = page_scores(pages, q, hq, hkv, d, n_pages, false, false);
  const std::vector<float> shared = page_scores(pages, q, hq, hkv, d, n_pages, true, true);
  const int selected = std::min(3, n_pages);
  std::vector<int32_t> top_pages;  // per query head, as topk_select leaves them
  std::vector<int32_t> expected_entries;
  for (int h = 0; h < hkv; ++h) {
    kernels::PageBounds bounds{.page_size = page, .head_dim = d};
    const float* head_keys = keys.data() + int64_t(h) * length * d;
    kernels::update_page_bounds(bounds, head_keys, 0, s.prompt);
    for (int j = s.prompt; j < length; ++j)
      kernels::update_page_bounds(bounds, head_keys, j, j + 1);
    ASSERT_EQ(bounds.n_pages(), n_pages);
    EXPECT_EQ(pages.rows(pages.minimum, h, n_pages, d), bounds.minimum) << "head " << h;
    EXPECT_EQ(pages.rows(pages.maximum, h, n_pages, d), bounds.maximum) << "head " << h;
    std::vector<float> group_max(n_pages, -std::numeric_limits<float>::infinity());
    for (int a = h * group; a < (h + 1) * group; ++a) {
      const std::vector<float> expected =
          kernels::page_bound_scores(bounds, q.data() + int64_t(a) * d);
      EXPECT_EQ(std::vector<float>(per_head.begin() + int64_t(a) * n_pages,
                                   per_head.begin() + int64_t(a + 1) * n_pages),
                expected)
          << "query head " << a;
      for (int p = 0; p < n_pages; ++p) group_max[p] = std::max(group_max[p], expected[p]);
      const std::vector<int32_t> kept = kernels::topk_select(expected.data(), n_pages, selected);
      top_pages.insert(top_pages.end(), kept.begin(), kept.end());
      const std::vector<int32_t> entries = kernels::expand_pages(kept, page, length);
      expected_entries.insert(expected_entries.end(), entries.begin(), entries.end());
      expected_entries.resize(size_t(a + 1) * selected * page, -1);  // the list's unused room
    }
    group_max[n_pages - 1] = std::numeric_limits<float>::infinity();  // keep_last_page
    EXPECT_EQ(std::vector<float>(shared.begin() + int64_t(h) * n_pages,
                                 shared.begin() + int64_t(h + 1) * n_pages),
              group_max)
        << "shared, head " << h;
  }
  auto d_pages = to_device(top_pages);
  auto d_indices = to_device(std::vector<int32_t>(expected_entries.size(), -1));
  cuda::DeviceBuffer d_offset(size_t(hq) * 8), d_count(size_t(hq) * 4);
  cuda::expand_pages({.pages = d_pages.as<int32_t>(),
                      .page_stride = selected,
                      .n_lists = hq,
                      .n_selected = selected,
                      .page_size = page,
                      .length = length,
                      .indices = d_indices.as<int32_t>(),
                      .index_stride = int64_t(selected) * page,
                      .index_offset = d_offset.as<int64_t>(),
                      .index_count = d_count.as<int32_t>()},
                     nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  const auto offsets = from_device<int64_t>(d_offset, hq);
  const auto counts = from_device<int32_t>(d_count, hq);
  const auto entries = from_device<int32_t>(d_indices, expected_entries.size());
  for (int a = 0; a < hq; ++a) {
    const auto list = expected_entries.begin() + int64_t(a) * selected * page;
    const int want = static_cast<int>(
        std::count_if(list, list + selected * page, [](int32_t j) { return j >= 0; }));
    EXPECT_EQ(offsets[a], int64_t(a) * selected * page);
    ASSERT_EQ(counts[a], want) << "query head " << a;
    EXPECT_TRUE(std::equal(list, list + want, entries.begin() + offsets[a])) << "query head " << a;
  }
}

// DropKV's pooling and window protection against its CPU twin, exactly: the same terms summed (or
// maxed) in the same order and divided by the same kernel, then the same maximum + 1. Raw scores
// with many ties and a wide range, as perturbation scores have. In place: pooled over the raw
// scores' own buffer (each segment's border values wait in the workspace for its neighbours).
inline void check_pool_and_protect(int heads, int length, int kernel, bool max_pool, int protect,
                                   bool in_place) {
  std::vector<float> raw(size_t(heads) * length);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = float((i * 7919) % 97) * (i % 3 ? 1e-3f : 10.f);
  std::vector<float> expected(raw.size());
  kernels::pool_and_protect(raw.data(), expected.data(), heads, length, kernel, max_pool, protect);
  auto d_raw = to_device(raw);
  cuda::DeviceBuffer d_pooled(in_place ? 0 : raw.size() * 4, "pooled"),
      workspace(cuda::pool_and_protect_workspace_bytes(heads, length, kernel), "pool workspace");
  const cuda::DeviceBuffer& pooled = in_place ? d_raw : d_pooled;
  cuda::pool_and_protect(d_raw.as<float>(), pooled.as<float>(), heads, length, kernel, max_pool,
                         protect, workspace.data(), nullptr);
  cuda::check(cudaDeviceSynchronize(), "pool_and_protect");
  EXPECT_EQ(from_device<float>(pooled, raw.size()), expected);
}

inline std::vector<OpCase> selection_cases() {
  std::vector<OpCase> cases;
  struct HashShape {
    int slots, length, head_dim;
  };
  for (const HashShape s : {HashShape{2, 3001, 128}, HashShape{3, 517, 64}, HashShape{1, 33, 128}})
    cases.push_back(
        {case_name("binary_hash_keys_slots", s.slots, "_length", s.length, "_d", s.head_dim),
         [s] { check_binary_hash_keys(s.slots, s.length, s.head_dim); }});
  // The fit: one and several blocks of kBinaryFitChunk keys (a last block partly filled), both
  // head dimensions, no iterations (the start vectors' signs) and OPC's recomputed signs.
  struct FitShape {
    int slots, length, head_dim, iterations;
    bool recompute_signs;
  };
  for (const FitShape s : {FitShape{3, 700, 64, 4, false}, FitShape{2, 1025, 128, 4, false},
                           FitShape{1, 100, 64, 0, false}, FitShape{2, 257, 128, 2, true}})
    cases.push_back(
        {case_name("binary_fit_projection_slots", s.slots, "_length", s.length, "_d", s.head_dim,
                   "_iterations", s.iterations, s.recompute_signs ? "_opc" : ""),
         [s] {
           check_binary_fit_projection(s.slots, s.length, s.head_dim, s.iterations,
                                       s.recompute_signs);
         }});
  // One element, a partial warp, and more elements than the grid's threads (each thread adds
  // several).
  for (const auto& [slots, per_slot] :
       {std::pair{1, int64_t{1}}, std::pair{3, int64_t{1000}}, std::pair{2, int64_t{300000}}})
    cases.push_back({case_name("fingerprint_rows_slots", slots, "_elements", per_slot),
                     [slots, per_slot] { check_fingerprint_rows(slots, per_slot); }});
  // Groups 1 to 8 at both head dimensions (the tensor-core columns past the group must never win;
  // odd groups project with a padded head, groups above 4 fold four lanes' columns), one to three
  // sequences, lengths off the 16-key tiles, the 128-key warp stages and the 2,048-key block steps;
  // a long list (several stages per warp, the ring refilled while it is scored).
  for (const ScoreCase s :
       {ScoreCase{3, 4, 4, 64, 333}, ScoreCase{2, 2, 2, 128, 1025}, ScoreCase{2, 4, 2, 64, 1037},
        ScoreCase{2, 8, 4, 128, 700}, ScoreCase{1, 6, 2, 64, 130}, ScoreCase{1, 9, 3, 64, 777},
        ScoreCase{2, 6, 2, 128, 2049}, ScoreCase{1, 12, 3, 128, 5000}, ScoreCase{2, 8, 2, 64, 3001},
        ScoreCase{2, 10, 2, 64, 1111}, ScoreCase{1, 5, 1, 128, 1500}, ScoreCase{3, 6, 1, 64, 2500},
        ScoreCase{1, 12, 2, 128, 999}, ScoreCase{2, 7, 1, 64, 1030}, ScoreCase{1, 14, 2, 128, 2100},
        ScoreCase{1, 16, 2, 64, 1500}, ScoreCase{2, 16, 2, 128, 4097},
        ScoreCase{1, 32, 8, 128, 200003, true}})
    cases.push_back({case_name("binary_score_keys_batch", s.batch, "_hq", s.hq, "_hkv", s.hkv, "_d",
                               s.d, "_length", s.length),
                     [s] { check_binary_score_keys(s); }});
  // The ends of the walk, each row able to fail on a key left unwritten (the keys start as a value
  // no score takes), written past its slot's length (the gap rows check it stays untouched) or one
  // key off (neighbouring random codes score differently):
  // one key, and one partial tile (15) or one key past a tile (17), the last slot's key forced;
  // a warp stage one key short (1023: eight stages, the last of 127 keys) and one key over (1025);
  // a block step that ends inside its sixth warp (2 x 2,048 + 700: warps 0-4 full, warp 5 with 60
  // keys, warps 6-15 none); 32 slots of 100,003 keys (four blocks per slot on 132 SMs: 12-13 stages
  // per warp, the 6-entry ring wrapping twice); sinks over more than one stage (150);
  // no mask at all; rows at every alignment (odd code and key strides, so 16-byte and 8-byte code
  // copies and every key misalignment; query rows at an odd offset), at groups 3 and 5.
  for (const ScoreCase s :
       {ScoreCase{2, 8, 2, 64, 1, true, 0}, ScoreCase{2, 8, 2, 128, 15, true},
        ScoreCase{2, 6, 2, 64, 17, true}, ScoreCase{1, 32, 8, 128, 1023, true},
        ScoreCase{1, 32, 8, 128, 1025, true}, ScoreCase{2, 6, 2, 64, 4796},
        ScoreCase{4, 32, 8, 128, 100003, true}, ScoreCase{2, 7, 1, 64, 1030, false, 150},
        ScoreCase{1, 14, 2, 128, 2100, false, 3, false},
        ScoreCase{2, 6, 2, 128, 3001, false, 3, true, 2},
        ScoreCase{2, 10, 2, 64, 2222, true, 5, true, 3}})
    cases.push_back(
        {case_name("binary_score_keys_walk_batch", s.batch, "_hq", s.hq, "_hkv", s.hkv, "_d", s.d,
                   "_length", s.length, "_sinks", s.sinks, s.mask ? "" : "_nomask",
                   s.gap ? "_gap" + std::to_string(s.gap) : std::string()),
         [s] { check_binary_score_keys(s); }});
  // A partial last page, one page, GQA groups 1 / 3 / 4 / 7.
  for (const PageShape s :
       {PageShape{6, 2, 128, 1000, 40}, PageShape{6, 2, 64, 1000, 40}, PageShape{9, 3, 64, 333, 5},
        PageShape{14, 2, 64, 500, 17}, PageShape{32, 8, 128, 2000, 9}, PageShape{4, 4, 64, 7, 3}})
    cases.push_back({case_name("page_bounds_hq", s.n_query_heads, "_hkv", s.n_kv_heads, "_d",
                               s.head_dim, "_prompt", s.prompt, "_decoded", s.decoded),
                     [s] { check_page_bounds(s); }});
  struct PoolShape {
    int heads, length, kernel;
    bool max_pool;
    int protect;
  };
  // One key; a kernel wider than the row; no pooling (kernel 1); one 2,048-position segment and
  // several (the last one short, one of 1); no protected tail, and one longer than the row; a
  // kernel wider than a segment; DropKV's kernel 11 over 128K positions. Each into its own buffer
  // and in place.
  for (const bool in_place : {false, true})
    for (const PoolShape s :
         {PoolShape{1, 1, 7, true, 0}, PoolShape{4, 5, 11, false, 2},
          PoolShape{3, 500, 1, false, 8}, PoolShape{8, 3001, 7, true, 32},
          PoolShape{8, 3001, 7, false, 32}, PoolShape{2, 70001, 11, false, 0},
          PoolShape{2, 300, 5, true, 500}, PoolShape{3, 4097, 11, true, 8},
          PoolShape{2, 9000, 4501, false, 3}, PoolShape{8, 131072, 11, true, 8}})
      cases.push_back({case_name("pool_and_protect_heads", s.heads, "_length", s.length, "_kernel",
                                 s.kernel, s.max_pool ? "_max" : "_avg", "_protect", s.protect,
                                 in_place ? "_in_place" : ""),
                       [s, in_place] {
                         check_pool_and_protect(s.heads, s.length, s.kernel, s.max_pool, s.protect,
                                                in_place);
                       }});
  return cases;
}

}  // namespace kvb::test
