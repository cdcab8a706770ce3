// The ART decode kernel (kernels/cuda/early_exit_decode.h) against the CPU walk
// (kernels/cpu/early_exit_decode.h) on bf16-representable inputs.
//
// The GPU semantics are the CPU's: the sequential decision over the whole walk, decision_window a
// cap in both. So every walker's blocks_visited must equal the CPU walk's exactly, and its output
// the CPU walk's within bf16 rounding, for walks that stop early, late (hundreds of blocks in, far
// beyond the old decider's window) and never; over head_dim 64 / 128, GQA groups 1 / 4 / 7 / 8,
// walks of 1 to 2,000 blocks, batch 1 and 4 (ragged lengths), forced layouts (chunks and decision
// segments of a few blocks, so that many chunks and segments meet) and the automatic one, index
// lists, the fused append, and CUDA-graph replays (the counters must leave every call clean).
// The inputs and the harness: tests/cuda/early_exit_check.h.
#include "kernels/cuda/early_exit_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/early_exit_decode.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/append_check.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/early_exit_check.h"

namespace kvb {
namespace {

using namespace test;  // NOLINT: the harness of this kernel's tests (early_exit_check.h)

// The inputs must exercise what the test is about, or it proves nothing.
struct Coverage {
  int stopped = 0, late = 0, never = 0;
};
Coverage coverage(const std::vector<Walk>& walks, int late_block) {
  Coverage c;
  for (const Walk& w : walks) {
    c.stopped += w.visited < w.total;
    c.late += w.visited < w.total && w.visited > late_block;
    c.never += w.visited == w.total;
  }
  return c;
}

TEST(EarlyExitDecodeTest, ZeroThresholdsEqualFullAttentionAndDecodeAttention) {
  KVB_REQUIRE_GPU();
  struct Shape {
    int d, hq, hkv, n;
  };
  for (const Shape s : {Shape{128, 32, 8, 3001}, Shape{64, 9, 3, 130}, Shape{128, 4, 4, 3},
                        Shape{64, 8, 1, 700}, Shape{64, 14, 2, 4100}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " n " + std::to_string(s.n));
    const Inputs in = make_random(s.d, s.hq, s.hkv, s.n, 21);
    cuda::EarlyExitDecodeOptions options;
    options.tau = 0.f;
    options.phi = 0.f;
    const GpuResult gpu = run_gpu({in}, options, {});
    const int group = s.hq / s.hkv;
    std::vector<float> full(size_t(s.hq) * s.d);
    for (int a = 0; a < s.hq; ++a) {
      kernels::DecodeAttentionArgs cpu;
      cpu.query = in.q.data() + size_t(a) * s.d;
      cpu.keys = in.k.data() + size_t(a / group) * s.n * s.d;
      cpu.values = in.v.data() + size_t(a / group) * s.n * s.d;
      cpu.n_entries = s.n;
      cpu.head_dim = s.d;
      cpu.output = full.data() + size_t(a) * s.d;
      kernels::decode_attention(cpu);
    }
    EXPECT_LT(test::max_abs_diff(gpu.output, full), 1e-2);
    const int blocks = kernels::early_exit_block_count(s.n, cpu_options(options));
    for (int h = 0; h < s.hkv; ++h) {
      EXPECT_EQ(gpu.state[h * cuda::kStateWords + cuda::kBlocksVisited], blocks);
      EXPECT_EQ(gpu.state[h * cuda::kStateWords + cuda::kBlocksTotal], blocks);
      EXPECT_EQ(gpu.state[h * cuda::kStateWords + cuda::kBlocksLoaded], blocks);
    }
    EXPECT_EQ(gpu.totals[0], static_cast<unsigned long long>(blocks) * s.hkv);
    EXPECT_EQ(gpu.totals[1], static_cast<unsigned long long>(blocks) * s.hkv);

    // The plain flash-decoding kernel on the same inputs.
    auto d_q = test::to_device_bf16(in.q), d_k = test::to_device_bf16(in.k),
         d_v = test::to_device_bf16(in.v);
    std::vector<int64_t> offset(s.hkv);
    for (int h = 0; h < s.hkv; ++h) offset[h] = int64_t(h) * s.n;
    auto d_offset = test::to_device(offset),
         d_length = test::to_device(std::vector<int32_t>(s.hkv, s.n));
    cuda::DeviceBuffer d_out(full.size() * 2);
    cuda::DeviceBuffer workspace(cuda::decode_attention_workspace_floats(1, s.hq, s.d, s.n) * 4);
    cuda::DecodeAttentionArgs plain;
    plain.q = d_q.as<__nv_bfloat16>();
    plain.q_seq_stride = int64_t(s.hq) * s.d;
    plain.k = d_k.as<__nv_bfloat16>();
    plain.v = d_v.as<__nv_bfloat16>();
    plain.kv_offset = d_offset.as<int64_t>();
    plain.kv_length = d_length.as<int32_t>();
    plain.max_kv_length = s.n;
    plain.out = d_out.as<__nv_bfloat16>();
    plain.out_seq_stride = int64_t(s.hq) * s.d;
    plain.batch = 1;
    plain.n_query_heads = s.hq;
    plain.n_kv_heads = s.hkv;
    plain.head_dim = s.d;
    plain.scale = 1.f / std::sqrt(float(s.d));
    plain.workspace = workspace.as<float>();
    cuda::decode_attention(plain, nullptr);
    cuda::check(cudaDeviceSynchronize(), "decode_attention");
    EXPECT_LT(test::max_abs_diff(gpu.output, test::from_device_bf16(d_out, full.size())), 1e-2);
  }
}

// The three kinds of walks of a profile cache of `blocks` walk blocks: a stop after block 3, a late
// stop (bumps up to about 60% of the walk, so beyond block 128 on long walks), no stop at all.
enum Kind { kEarly = 0, kLate = 1, kNever = 2 };
GroupProfile profile_of(Kind kind, int blocks) {
  if (kind == kNever) return GroupProfile{false, {}};
  int last_bump = std::max(3, (blocks * 3 / 5) | 1);
  if (kind == kEarly || last_bump + 2 >= blocks - 1) last_bump = 0;  // short walks: an early stop
  return last_bump > 0 ? stopping_after(last_bump) : GroupProfile{};
}

struct TableCase {
  int d, hq, hkv;
  std::vector<int> lengths;  // one per sequence of the batch
  Layout layout;
  Kind first_kind;  // walker w (sequence after sequence) gets kind (first_kind + w) % 3
  int patience = 2;
};

// The table of shapes: head_dim 64 / 128, groups 1 / 4 / 7 / 8, 1 .. 2,000 blocks, batch 1 and
// 4 (ragged), forced and automatic layouts.
TEST(EarlyExitDecodeTest, LateAndNeverStoppingWalksMatchTheCpuWalk) {
  KVB_REQUIRE_GPU();
  const int long_walk = 64 * 1998 + 4 + 30;  // 2,000 walk blocks
  const std::vector<int> ragged_qwen = {64 * 300 + 9, 64 * 150 + 4, 5, 64 * 40};
  const std::vector<TableCase> table = {
      {64, 14, 2, {long_walk}, {}, kLate},
      {64, 14, 2, {long_walk}, {3, 7}, kEarly},
      {64, 14, 2, ragged_qwen, {}, kEarly},
      {64, 14, 2, ragged_qwen, {2, 2}, kLate},
      {128, 32, 8, {64 * 260 + 17}, {}, kEarly},
      {128, 32, 8, {64 * 260 + 17}, {1, 1}, kLate, 3},
      {128, 32, 8, {3, 68, 64 * 9 + 5, 64 * 200 + 33}, {4, 9}, kEarly},
      {128, 8, 8, {64 * 180 + 1}, {}, kEarly},
      {128, 8, 8, {64 * 180 + 1, 64 * 10 + 63, 70, 64 * 179}, {5, 5}, kNever},
      {64, 8, 1, {long_walk}, {}, kLate},
      {64, 8, 1, {64 * 500 + 2}, {16, 16}, kNever, 3},
      {64, 8, 1, {64 * 500 + 2, 64 * 499, 64 * 260}, {}, kEarly, 3},
      {128, 16, 2, {64 * 700 + 40, 64, 64 * 131 + 4, 1}, {}, kEarly},
      {128, 16, 2, {64 * 700 + 40}, {6, 50}, kLate},
  };
  for (size_t c = 0; c < table.size(); ++c) {
    const TableCase& t = table[c];
    SCOPED_TRACE("case " + std::to_string(c) + ": d " + std::to_string(t.d) + " group " +
                 std::to_string(t.hq / t.hkv) + " batch " + std::to_string(t.lengths.size()) +
                 " chunk " + std::to_string(t.layout.chunk_blocks) + " segment " +
                 std::to_string(t.layout.segment_blocks));
    std::vector<Inputs> batch;
    std::vector<Kind> kinds;  // per walker
    std::vector<int> walk_blocks;
    for (size_t s = 0; s < t.lengths.size(); ++s) {
      const int n = t.lengths[s];
      const int blocks = kernels::early_exit_block_count(n, kernels::EarlyExitOptions{});
      std::vector<GroupProfile> groups;
      for (int h = 0; h < t.hkv; ++h) {
        kinds.push_back(static_cast<Kind>((t.first_kind + kinds.size()) % 3));
        walk_blocks.push_back(blocks);
        groups.push_back(profile_of(kinds.back(), blocks));
      }
      batch.push_back(make_profile(t.d, t.hq, t.hkv, n, groups, 100 + c * 10 + s));
    }
    cuda::EarlyExitDecodeOptions options;  // tau 1e-5, phi 1e-3, 4 sinks, d_scale by norm
    options.patience = t.patience;
    const std::vector<Walk> walks = expected_dense(batch, options);
    // The inputs must give the walks their kind, or the case proves less than it says.
    for (size_t w = 0; w < walks.size(); ++w) {
      SCOPED_TRACE("walker " + std::to_string(w) + " of " + std::to_string(walk_blocks[w]) +
                   " blocks, CPU visits " + std::to_string(walks[w].visited));
      if (kinds[w] == kNever || walk_blocks[w] <= 2) {
        ASSERT_EQ(walks[w].visited, walks[w].total);
      }
      if (kinds[w] != kNever && walk_blocks[w] > 12) {
        ASSERT_LT(walks[w].visited, walks[w].total);
      }
      if (kinds[w] == kLate && walk_blocks[w] > 250) {
        ASSERT_GT(walks[w].visited, 128);
      }
    }
    const GpuResult gpu = run_gpu(batch, options, t.layout);
    SCOPED_TRACE("layout: chunk " + std::to_string(gpu.chunk_blocks) + " x " +
                 std::to_string(gpu.splits) + ", segment " + std::to_string(gpu.segment_blocks) +
                 " x " + std::to_string(gpu.segments));
    if (t.layout.chunk_blocks > 0) {
      ASSERT_EQ(gpu.chunk_blocks, t.layout.chunk_blocks);
    }
    ASSERT_EQ(gpu.segment_blocks % gpu.chunk_blocks, 0);
    ASSERT_LE(gpu.segments, cuda::kMaxSegments);
    expect_matches(walks, gpu, t.hq / t.hkv, t.d);
  }
}

class EarlyExitCriterionTest : public ::testing::TestWithParam<cuda::EarlyExitScale> {};

TEST_P(EarlyExitCriterionTest, EveryScaleCriterionMatchesTheCpuWalk) {
  KVB_REQUIRE_GPU();
  cuda::EarlyExitDecodeOptions options;
  options.scale_criterion = GetParam();
  const int n = 64 * 400 + 21;
  const Inputs in = make_profile(
      128, 32, 8, n,
      {GroupProfile{}, stopping_after(201), stopping_after(9), GroupProfile{false, {}}}, 5);
  const std::vector<Walk> walks = expected_dense({in}, options);
  const Coverage cover = coverage(walks, 128);
  ASSERT_GT(cover.late, 0);
  ASSERT_GT(cover.never, 0);
  for (const Layout layout : {Layout{}, Layout{4, 4}, Layout{11, 30}}) {
    SCOPED_TRACE("chunk " + std::to_string(layout.chunk_blocks) + " segment " +
                 std::to_string(layout.segment_blocks));
    expect_matches(walks, run_gpu({in}, options, layout), 4, in.d);
  }
}

INSTANTIATE_TEST_SUITE_P(MassNormChange, EarlyExitCriterionTest,
                         ::testing::Values(cuda::EarlyExitScale::kMass, cuda::EarlyExitScale::kNorm,
                                           cuda::EarlyExitScale::kChange));

// decision_window is a cap on both sides: a walk that would stop at or past it walks every block.
TEST(EarlyExitDecodeTest, DecisionWindowCapsTheStop) {
  KVB_REQUIRE_GPU();
  const Inputs in =
      make_profile(64, 14, 2, 64 * 300 + 7, {GroupProfile{}, stopping_after(151)}, 31);
  const std::vector<Walk> uncapped = expected_dense({in}, cuda::EarlyExitDecodeOptions{});
  ASSERT_LT(uncapped[0].visited, uncapped[0].total);
  ASSERT_LT(uncapped[1].visited, uncapped[1].total);
  const int early = uncapped[0].visited - 1, late = uncapped[1].visited - 1;  // the stop blocks
  ASSERT_GT(late, 128);
  for (const int window : {0, early, early + 1, late, late + 1}) {
    SCOPED_TRACE("window " + std::to_string(window));
    cuda::EarlyExitDecodeOptions options;
    options.decision_window = window;
    const std::vector<Walk> walks = expected_dense({in}, options);
    for (int h = 0; h < 2; ++h) {
      const bool stops = window == 0 || uncapped[h].visited - 1 < window;
      EXPECT_EQ(walks[h].visited, stops ? uncapped[h].visited : uncapped[h].total);
    }
    expect_matches(walks, run_gpu({in}, options, {}), 7, in.d);
  }
}

TEST(EarlyExitDecodeTest, DisabledVisitsEveryBlock) {
  KVB_REQUIRE_GPU();
  const Inputs in =
      make_profile(128, 32, 8, 64 * 300 + 5, {GroupProfile{}, stopping_after(141)}, 13);
  cuda::EarlyExitDecodeOptions options;
  // With termination on every group stops early (so the disabled run has something to ignore).
  const GpuResult on = run_gpu({in}, options, {});
  for (int h = 0; h < in.hkv; ++h)
    ASSERT_LT(on.state[h * cuda::kStateWords + cuda::kBlocksVisited],
              on.state[h * cuda::kStateWords + cuda::kBlocksTotal]);
  options.enabled = false;
  const std::vector<Walk> walks = expected_dense({in}, options);
  for (const Walk& w : walks) ASSERT_EQ(w.visited, w.total);
  expect_matches(walks, run_gpu({in}, options, {}), 4, in.d);
  expect_matches(walks, run_gpu({in}, options, {8, 8}), 4, in.d);
}

// Index lists: each query head walks its own ascending list with a logit bias; the CPU walks the
// gathered entries of that head alone. Heads 0 and 1 of every group list the whole cache (their
// walks stop where the dense profile's do, late for the bumped groups); the others list the 4
// sinks (except every fourth head), a third of the middle and the last 40 entries.
TEST(EarlyExitDecodeTest, IndexListsMatchTheCpuWalkOverTheSelection) {
  KVB_REQUIRE_GPU();
  const int n = 64 * 260 + 3;
  const Inputs in = make_profile(
      128, 32, 8, n, {GroupProfile{}, stopping_after(161), GroupProfile{false, {}}}, 17);
  const int group = in.hq / in.hkv;
  IndexLists lists;
  std::mt19937 rng(3);
  for (int a = 0; a < in.hq; ++a) {
    lists.offset.push_back(static_cast<int64_t>(lists.indices.size()));
    int count = 0;
    for (int j = 0; j < in.n; ++j)
      if (a % group < 2 || (j < 4 && a % 4 != 3) || j >= in.n - 40 || rng() % 3 == 0) {
        lists.indices.push_back(j);
        lists.bias.push_back(a % group < 2 ? 0.f : float(int(rng() % 21) - 10) / 100.f);
        ++count;
      }
    lists.count.push_back(count);
  }
  for (const bool zero_thresholds : {false, true}) {
    SCOPED_TRACE(zero_thresholds ? "tau = phi = 0" : "defaults");
    cuda::EarlyExitDecodeOptions options;
    if (zero_thresholds) options.tau = options.phi = 0.f;
    std::vector<Walk> walks;
    for (int a = 0; a < in.hq; ++a) {
      const int m = lists.count[a];
      std::vector<float> keys(size_t(m) * in.d), values(keys.size());
      for (int i = 0; i < m; ++i) {
        const int j = lists.indices[lists.offset[a] + i];
        std::copy_n(in.k.data() + (size_t(a / group) * in.n + j) * in.d, in.d,
                    keys.data() + size_t(i) * in.d);
        std::copy_n(in.v.data() + (size_t(a / group) * in.n + j) * in.d, in.d,
                    values.data() + size_t(i) * in.d);
      }
      kernels::EarlyExitDecodeArgs args;
      args.queries = in.q.data() + size_t(a) * in.d;
      args.n_heads = 1;
      args.keys = keys.data();
      args.values = values.data();
      args.logit_bias = lists.bias.data() + lists.offset[a];
      args.n_entries = m;
      args.head_dim = in.d;
      walks.push_back(expected_walk(args, options));
    }
    const Coverage cover = coverage(walks, 128);
    if (zero_thresholds) {
      EXPECT_EQ(cover.stopped, 0);
    } else {
      ASSERT_GT(cover.stopped, 0);
      ASSERT_GT(cover.late, 0);
      ASSERT_GT(cover.never, 0);
    }
    for (const Layout layout : {Layout{}, Layout{5, 10}}) {
      SCOPED_TRACE("chunk " + std::to_string(layout.chunk_blocks));
      expect_matches(walks, run_gpu({in}, options, layout, &lists), 1, in.d);
    }
  }
}

// The walk with the step's append (DecodeAppend) against rope_append_kv_decode followed by the
// plain walk, bit for bit over three chained steps: outputs, both caches, lengths and the walkers'
// state words. A profile cache (position 0: RoPE is the identity, the new keys copy a recent one)
// stops early (automatic layout) and late (bumps to block 101); with one-block chunks the new
// entry is in the second chunk (walk block 1). Random caches of 2 entries (within the sinks) and
// 700 walk every block, with a QKV bias and a real rotation.
TEST(EarlyExitDecodeTest, FusedAppendMatchesSeparateAppend) {
  KVB_REQUIRE_GPU();
  struct Case {
    int n;
    bool profile;
    int last_bump;  // profile: 0 = a stop after block 3
    int chunk_blocks;
  };
  for (const Case c : {Case{5000, true, 0, 0}, Case{64 * 150, true, 101, 0}, Case{5000, true, 0, 1},
                       Case{2, false, 0, 0}, Case{700, false, 0, 1}}) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " chunk " + std::to_string(c.chunk_blocks));
    const int d = 128, hq = 32, hkv = 8, steps = 3, capacity = c.n + steps;
    const int width = (hq + 2 * hkv) * d;
    const GroupProfile profile = c.last_bump > 0 ? stopping_after(c.last_bump) : GroupProfile{};
    const Inputs in =
        c.profile ? make_profile(d, hq, hkv, c.n, {profile}, 71) : make_random(d, hq, hkv, c.n, 72);
    std::vector<float> k_cache(size_t(hkv) * capacity * d, 0.f), v_cache(k_cache.size(), 0.f);
    for (int h = 0; h < hkv; ++h)
      for (size_t i = 0; i < size_t(c.n) * d; ++i) {
        k_cache[size_t(h) * capacity * d + i] = in.k[size_t(h) * c.n * d + i];
        v_cache[size_t(h) * capacity * d + i] = in.v[size_t(h) * c.n * d + i];
      }
    std::vector<std::vector<float>> rows;
    for (int step = 0; step < steps; ++step) {
      std::vector<float> row = test::random_bf16_values(size_t(width), 80 + step, 1.f);
      if (c.profile) {  // the profile's queries; new keys as the most recent one
        std::copy(in.q.begin(), in.q.end(), row.begin());
        for (int h = 0; h < hkv; ++h)
          std::copy_n(in.k.begin() + (size_t(h) * c.n + c.n - 1) * d, d,
                      row.begin() + size_t(hq + h) * d);
      }
      rows.push_back(row);
    }
    std::vector<int64_t> offsets(hkv);
    for (int h = 0; h < hkv; ++h) offsets[h] = int64_t(h) * capacity;
    auto d_offsets = test::to_device(offsets);
    auto d_inv_freq = test::to_device(kernels::rope_inverse_frequencies(d, 10000.f));
    auto d_positions = test::to_device(std::vector<int32_t>{c.profile ? 0 : 777});
    auto d_bias = test::to_device_bf16(test::random_bf16_values(width, 73, 0.1f));
    struct Run {
      cuda::DeviceBuffer lengths, k, v, out, workspace, state;
      std::vector<cuda::DeviceBuffer> qkv;
    };
    auto make_run = [&] {
      Run r{test::to_device(std::vector<int32_t>(hkv, c.n)),
            test::to_device_bf16(k_cache),
            test::to_device_bf16(v_cache),
            cuda::DeviceBuffer(size_t(steps) * hq * d * 2),
            cuda::DeviceBuffer(cuda::early_exit_decode_workspace_floats(1, hq, d, capacity) * 4),
            test::to_device(std::vector<int32_t>(size_t(hkv) * cuda::kStateWords, 0)),
            {}};
      for (const auto& row : rows) r.qkv.push_back(test::to_device_bf16(row));
      return r;
    };
    const cuda::RopeArgs rope{.bias = c.profile ? nullptr : d_bias.as<__nv_bfloat16>(),
                              .positions = d_positions.as<int32_t>(),
                              .inv_freq = d_inv_freq.as<float>(),
                              .n = 1,
                              .n_query_heads = hq,
                              .n_kv_heads = hkv,
                              .head_dim = d};
    auto walk_for = [&](Run& r, int step) {
      return cuda::EarlyExitDecodeArgs{
          .attention = {.q = r.qkv[step].as<__nv_bfloat16>(),
                        .q_seq_stride = width,
                        .k = r.k.as<__nv_bfloat16>(),
                        .v = r.v.as<__nv_bfloat16>(),
                        .kv_offset = d_offsets.as<int64_t>(),
                        .kv_length = r.lengths.as<int32_t>(),
                        .max_kv_length = capacity,
                        .out = r.out.as<__nv_bfloat16>() + size_t(step) * hq * d,
                        .out_seq_stride = int64_t(hq) * d,
                        .batch = 1,
                        .n_query_heads = hq,
                        .n_kv_heads = hkv,
                        .head_dim = d,
                        .scale = 1.f / std::sqrt(float(d)),
                        .workspace = r.workspace.as<float>(),
                        .append = {}},
          .options = {},
          .walker_state = r.state.as<int32_t>(),
          .chunk_blocks = c.chunk_blocks};
    };
    Run fused = make_run(), separate = make_run();
    for (int step = 0; step < steps; ++step) {
      cuda::EarlyExitDecodeArgs ea = walk_for(fused, step);
      ea.attention.append =
          cuda::decode_append_for(rope, fused.k.as<__nv_bfloat16>(), fused.v.as<__nv_bfloat16>(),
                                  fused.lengths.as<int32_t>());
      cuda::early_exit_decode(ea, nullptr);

      test::append_separately(rope, separate.qkv[step], d_offsets, separate.lengths, separate.k,
                              separate.v);
      cuda::early_exit_decode(walk_for(separate, step), nullptr);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const test::AppendedRun got =
        test::expect_same_appends(fused, separate, hkv, k_cache.size(), size_t(steps) * hq * d);
    EXPECT_EQ(got.lengths[0], c.n + steps);
    std::vector<int32_t> fused_state(size_t(hkv) * cuda::kStateWords), separate_state(fused_state);
    fused.state.download(fused_state.data(), fused_state.size() * 4);
    separate.state.download(separate_state.data(), separate_state.size() * 4);
    EXPECT_EQ(fused_state, separate_state);
    if (c.profile) {  // stopped before the end: the stop path ran
      EXPECT_LT(fused_state[cuda::kBlocksVisited], fused_state[cuda::kBlocksTotal]);
      if (c.last_bump > 0) {
        EXPECT_GT(fused_state[cuda::kBlocksVisited], 100);
      }
    }
  }
}

TEST(EarlyExitDecodeTest, RejectsUnsupportedOptions) {
  KVB_REQUIRE_GPU();
  cuda::EarlyExitDecodeArgs ea;
  ea.attention.batch = 1;
  ea.attention.n_query_heads = 32;
  ea.attention.n_kv_heads = 2;
  ea.attention.head_dim = 128;
  EXPECT_THROW(cuda::early_exit_decode(ea, nullptr), std::invalid_argument);  // group 16 > 8
  ea.attention.n_kv_heads = 8;
  ea.options.sink_tokens = 65;
  EXPECT_THROW(cuda::early_exit_decode(ea, nullptr), std::invalid_argument);
  ea.options.sink_tokens = 4;
  ea.options.decision_window = -1;
  EXPECT_THROW(cuda::early_exit_decode(ea, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace kvb
