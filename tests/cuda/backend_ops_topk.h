// The backend-ops rows of the shared top-k (kernels/cuda/topk_select.h,
// tests/cuda/backend_ops_test.cc) against its CPU twin (kernels/cpu/topk_select.h): the same
// indices, in increasing order, then the forced tail, and the index-list bookkeeping. Its paths:
// the one-pass 16-bit histogram in a cluster and split over many blocks, the radix select for f32
// scores, for k = 0 or k = length and for lists too long for the one-pass blocks without a
// workspace, and the radix path for 16-bit keys kept for A/B timing (keys16_as_digits).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/topk_select.h"
#include "kernels/cuda/topk_select.h"
#include "tests/cuda/backend_ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

// Lists with many ties (and both zeros), for 16-bit keys and f32 scores, with and without a
// workspace, and 16-bit keys through the radix path; k from 1 to the whole list, then 2 forced tail
// indices; each list's bookkeeping for 2 query heads.
inline void check_topk_select(int length) {
  std::mt19937 rng(4);
  const int lists = 3, tail = 2;
  std::vector<uint16_t> keys(size_t(lists) * length);
  std::vector<float> scores(keys.size());
  for (size_t n = 0; n < keys.size(); ++n) {
    keys[n] = static_cast<uint16_t>(rng() % 50 + (n % 5 == 0 ? 65000 : 30000));
    scores[n] = float(int(rng() % 41) - 20) * 0.25f * (n % 7 == 0 ? -1.0f : 1.0f);
  }
  auto d_keys = to_device(keys);
  auto d_scores = to_device(scores);
  cuda::DeviceBuffer workspace(
      cuda::topk_select_workspace_bytes(lists, length, cuda::TopkKeys::kU16));
  for (const int k : {1, length / 3, length - 1, length}) {
    if (k < 1) continue;
    // Bit 0: f32 scores; bit 1: a workspace; bit 2: 16-bit keys through the radix path.
    for (const int variant : {0, 1, 2, 3, 4, 6}) {
      const bool use_float = variant & 1, split = variant & 2, as_digits = variant & 4;
      const int64_t stride = k + tail;
      cuda::DeviceBuffer d_out(size_t(lists) * stride * 4), d_offset(size_t(lists) * 2 * 8),
          d_count(size_t(lists) * 2 * 4);
      cuda::TopkSelectArgs args;
      if (use_float)
        args.scores = d_scores.as<float>();
      else
        args.keys16 = d_keys.as<uint16_t>();
      args.key_stride = length;
      args.n_lists = lists;
      args.length = length;
      args.k = k;
      args.tail_begin = length;
      args.tail_count = tail;
      args.indices = d_out.as<int32_t>();
      args.index_stride = stride;
      args.heads_per_list = 2;
      args.index_offset = d_offset.as<int64_t>();
      args.index_count = d_count.as<int32_t>();
      if (split) {
        args.workspace = workspace.data();
        args.workspace_bytes = workspace.bytes();
      }
      args.keys16_as_digits = as_digits;
      cuda::topk_select(args, nullptr);
      cuda::check(cudaDeviceSynchronize(), "sync");
      const auto got = from_device<int32_t>(d_out, size_t(lists) * stride);
      const auto offsets = from_device<int64_t>(d_offset, lists * 2);
      const auto counts = from_device<int32_t>(d_count, lists * 2);
      for (int l = 0; l < lists; ++l) {
        std::vector<int32_t> want =
            use_float ? kernels::topk_select(scores.data() + size_t(l) * length, length, k)
                      : kernels::topk_select(keys.data() + size_t(l) * length, length, k);
        want.push_back(length);
        want.push_back(length + 1);
        EXPECT_EQ(std::vector<int32_t>(got.begin() + l * stride, got.begin() + (l + 1) * stride),
                  want)
            << "k " << k << " list " << l << " variant " << variant;
        for (int r = 0; r < 2; ++r) {
          EXPECT_EQ(offsets[l * 2 + r], l * stride);
          EXPECT_EQ(counts[l * 2 + r], k + tail);
        }
      }
    }
  }
}

// topk_select on f32 scores with heavy ties (97 distinct values) over several heads, as DropKV's
// pooled scores give it: ascending, ties to the lower index, against the CPU twin.
inline void check_topk_select_ties(int heads, int length, int keep) {
  std::vector<float> scores(size_t(heads) * length);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = float((i * 7919) % 97);  // many ties
  auto d_scores = to_device(scores);
  cuda::DeviceBuffer d_kept(size_t(heads) * keep * 4),
      workspace(cuda::topk_select_workspace_bytes(heads, length, cuda::TopkKeys::kF32));
  cuda::TopkSelectArgs args;
  args.scores = d_scores.as<float>();
  args.key_stride = length;
  args.n_lists = heads;
  args.length = length;
  args.k = keep;
  args.indices = d_kept.as<int32_t>();
  args.index_stride = keep;
  args.workspace = workspace.data();
  args.workspace_bytes = workspace.bytes();
  cuda::topk_select(args, nullptr);
  const auto kept = from_device<int32_t>(d_kept, size_t(heads) * keep);
  for (int h = 0; h < heads; ++h)
    EXPECT_EQ(std::vector<int32_t>(kept.begin() + h * keep, kept.begin() + (h + 1) * keep),
              kernels::topk_select(scores.data() + size_t(h) * length, length, keep))
        << "head " << h;
}

// Key sets for the 16-bit rows.
enum class Keys16 {
  // BinaryPC's: nearly every key within a few values of 32768 (seven values, 0x7FFD..0x8003, across
  // the high-byte boundary 0x7F / 0x80, most of them 0x8000), every 512th 0xFFFF (sinks and EAS
  // tokens); k = length / 2 lands inside the 0x8000 group, so ties decide across blocks.
  kBinaryPcLike,
  kAllEqual,   // one group of ties: the first k indices; a block's counters at their fullest
  kFullRange,  // every value, 0 and 0xFFFF among them: every high byte's bins
};

inline const char* keys16_name(Keys16 kind) {
  return kind == Keys16::kBinaryPcLike ? "binarypc"
         : kind == Keys16::kAllEqual   ? "equal"
                                       : "spread";
}

struct Keys16Case {
  Keys16 kind;
  int lists, length;
  std::vector<int> ks;
  // key_stride = length + pad; list 0 starts `offset` keys into the buffer. Both move the lists off
  // the 16-byte boundaries; the keys around the lists are 0xFFFF, so reading one of them changes
  // the result.
  int pad = 0, offset = 0;
  bool workspace = true;
  bool variants = false;  // also per-list tail ends (tail_end) and the radix path (A/B)
};

inline std::vector<uint16_t> keys16_for(const Keys16Case& c) {
  const int64_t stride = int64_t(c.length) + c.pad;
  std::vector<uint16_t> keys(c.offset + c.lists * stride, 0xFFFF);
  std::mt19937 rng(11);
  static constexpr int kNearBy[22] = {-3, -2, -2, -1, -1, -1, -1, 0, 0, 0, 0,
                                      0,  0,  0,  0,  1,  1,  1,  1, 2, 2, 3};
  for (int l = 0; l < c.lists; ++l)
    for (int i = 0; i < c.length; ++i) {
      uint16_t& key = keys[c.offset + l * stride + i];
      switch (c.kind) {
        case Keys16::kBinaryPcLike:
          key = i % 512 == 37 ? 0xFFFF : uint16_t(0x8000 + kNearBy[rng() % 22]);
          break;
        case Keys16::kAllEqual:
          key = 0x8000;
          break;
        case Keys16::kFullRange:
          key = i % 1000 == 1 ? 0 : i % 1000 == 2 ? 0xFFFF : uint16_t(rng());
          break;
      }
    }
  return keys;
}

// Where the device's list differs from the expected one: the first differing entry, or "" if none.
inline std::string first_difference(const int32_t* got, const std::vector<int32_t>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return "entry " + std::to_string(i) + ": " + std::to_string(got[i]) + " instead of " +
             std::to_string(want[i]);
  return "";
}

// 16-bit keys against the CPU twin for each k of the case: each list's k indices, its tail (2
// entries, or list l's l % 3 through tail_end) and 3 spare entries that must keep the -7 they start
// with; each list's bookkeeping for 2 query heads.
inline void check_topk_keys16(const Keys16Case& c) {
  const int64_t stride = int64_t(c.length) + c.pad;
  const std::vector<uint16_t> keys = keys16_for(c);
  auto d_keys = to_device(keys);
  cuda::DeviceBuffer workspace(
      c.workspace ? cuda::topk_select_workspace_bytes(c.lists, c.length, cuda::TopkKeys::kU16) : 0);
  std::vector<int32_t> tail_end(c.lists);
  for (int l = 0; l < c.lists; ++l) tail_end[l] = c.length + l % 3;
  auto d_tail_end = to_device(tail_end);
  constexpr int kTail = 2, kSpare = 3, kUnwritten = -7;
  for (const int k : c.ks) {
    for (const int variant : c.variants ? std::vector<int>{0, 1, 2} : std::vector<int>{0}) {
      const bool per_list_tail = variant == 1, as_digits = variant == 2;
      const int64_t index_stride = k + kTail + kSpare;
      auto d_out = to_device(std::vector<int32_t>(c.lists * index_stride, kUnwritten));
      cuda::DeviceBuffer d_offset(size_t(c.lists) * 2 * 8), d_count(size_t(c.lists) * 2 * 4);
      cuda::TopkSelectArgs args;
      args.keys16 = d_keys.as<uint16_t>() + c.offset;
      args.key_stride = stride;
      args.n_lists = c.lists;
      args.length = c.length;
      args.k = k;
      args.tail_begin = c.length;
      args.tail_count = kTail;
      if (per_list_tail) args.tail_end = d_tail_end.as<int32_t>();
      args.indices = d_out.as<int32_t>();
      args.index_stride = index_stride;
      args.heads_per_list = 2;
      args.index_offset = d_offset.as<int64_t>();
      args.index_count = d_count.as<int32_t>();
      args.workspace = workspace.data();
      args.workspace_bytes = workspace.bytes();
      args.keys16_as_digits = as_digits;
      cuda::topk_select(args, nullptr);
      cuda::check(cudaDeviceSynchronize(), "topk_select");
      const auto got = from_device<int32_t>(d_out, c.lists * index_stride);
      const auto offsets = from_device<int64_t>(d_offset, c.lists * 2);
      const auto counts = from_device<int32_t>(d_count, c.lists * 2);
      for (int l = 0; l < c.lists; ++l) {
        const int tail = per_list_tail ? l % 3 : kTail;
        std::vector<int32_t> want =
            kernels::topk_select(keys.data() + c.offset + l * stride, c.length, k);
        for (int i = 0; i < tail; ++i) want.push_back(c.length + i);
        want.resize(index_stride, kUnwritten);
        EXPECT_EQ(first_difference(got.data() + l * index_stride, want), "")
            << "k " << k << ", list " << l << ", variant " << variant;
        for (int r = 0; r < 2; ++r) {
          EXPECT_EQ(offsets[l * 2 + r], l * index_stride) << "list " << l;
          EXPECT_EQ(counts[l * 2 + r], k + tail) << "list " << l;
        }
      }
    }
  }
}

inline std::vector<OpCase> topk_cases() {
  std::vector<OpCase> cases;
  // Lengths that give clusters of 1, 2, 4 and 8 blocks, and the split path.
  for (const int length : {1, 7, 1000, 8192, 12000, 30000, 70001, 300000})
    cases.push_back(
        {case_name("topk_select_length", length), [length] { check_topk_select(length); }});
  struct SortedShape {
    int heads, length, keep;
  };
  for (const SortedShape s :
       {SortedShape{3, 500, 50}, SortedShape{8, 3001, 300}, SortedShape{2, 70001, 7000}})
    cases.push_back(
        {case_name("topk_select_ties_heads", s.heads, "_length", s.length, "_keep", s.keep),
         [s] { check_topk_select_ties(s.heads, s.length, s.keep); }});
  using K = Keys16;
  // The one-pass path's forms and edges: one block (20 keys, the first and last 16-byte groups cut
  // by the list's ends); clusters of 4 (8 lists of 32K) and of 1 (40 lists: with 32, 32 x 1 x 2 <=
  // 132 / 2 lets cluster_blocks_for double to clusters of 2 on a 132-SM card); the split form at
  // 128K off the 16-byte boundaries, at 512K for 1 list (65 blocks) and for 32 lists (blocks of
  // over 40K keys: 5 groups for most threads); one value everywhere; without a workspace a cluster
  // of 8 blocks of 40,960 equal keys each (the 16-bit counters' fullest), and a list too long for
  // it (the radix path). k = 0 and k = length take the radix path.
  const std::vector<Keys16Case> keys16 = {
      {K::kBinaryPcLike, 1, 20, {0, 1, 7, 19, 20}, 0, 5, true, true},
      {K::kBinaryPcLike, 1, 20, {7}, 0, 5, false, false},
      {K::kFullRange, 3, 1000, {1, 333, 999}, 3, 1, true, true},
      {K::kBinaryPcLike, 8, 32768, {1, 2048, 16385, 32767}, 3, 5, true, true},
      {K::kBinaryPcLike, 40, 32768, {2048, 16385}},
      {K::kBinaryPcLike, 8, 131075, {0, 1, 2048, 65539, 131074, 131075}, 3, 5, true, true},
      {K::kAllEqual, 2, 70001, {1, 35000, 70000}, 0, 0, true, true},
      {K::kBinaryPcLike, 1, 524288, {2048, 262145}},
      {K::kBinaryPcLike, 32, 524288, {2048, 262145}},
      {K::kFullRange, 8, 524293, {2048}, 3, 2},
      {K::kAllEqual, 1, 327673, {2048, 200000}, 0, 0, false, false},
      {K::kFullRange, 2, 600000, {2048, 300000}, 0, 0, false, false},
  };
  for (const Keys16Case& c : keys16)
    cases.push_back({case_name("topk_select_keys16_", keys16_name(c.kind), "_lists", c.lists,
                               "_length", c.length, c.pad ? "_pad" : "", c.offset ? "_offset" : "",
                               c.workspace ? "" : "_no_workspace"),
                     [c] { check_topk_keys16(c); }});
  return cases;
}

}  // namespace kvb::test
