// The ART decode kernel (kernels/cuda/early_exit_decode.h) against the CPU walk
// (kernels/cpu/early_exit_attention.h) on bf16-representable inputs.
//
// The GPU semantics: only the decider split (walk blocks 0 .. W-1, W its window) may stop. So the expectation of
// a walker is the CPU walk when that walk stops at a block < C, and full attention over every
// block otherwise (expected_walk below); the tests choose inputs where walkers stop inside the
// window, exactly at its last block, beyond it and never.
//
// Attention profile of the "sink and recent dominate" inputs (make_profile): the query heads of a
// KV group share a direction c (q_a = c + small noise); key j = noise + lambda_j * c * sqrt(d)/|c|^2,
// so its logit is about lambda_j: 16 for the 4 sink entries, 10 for the 48 most recent ones, ~0
// elsewhere; a "bump" puts 16 entries of logit 10 inside one chosen walk block (which resets the
// counters there), and a group without sinks has no dominant entries at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "engine/cpu/forward.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/errors.h"
#include "engine/presets.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/early_exit_attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/early_exit_decode.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/append_check.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

using test::round_bf16;

struct GroupProfile {
  bool sinks_dominate = true;
  std::vector<int> bump_walk_blocks;  // walk blocks holding 16 extra entries of logit 10
};

// Cache of one sequence: per KV head n entries, stored head after head.
struct Inputs {
  int d = 128, hq = 32, hkv = 8, n = 0;
  std::vector<float> q, k, v;  // q [hq, d]; k, v [hkv, n, d]
};

// Entries [begin, end) of walk block w with 4 sinks and 64-entry blocks (the CPU walk's order).
std::pair<int, int> block_entries(int w, int n) {
  if (w == 0) return {0, 4};
  const int end = n - (w - 1) * 64;
  return {std::max(4, end - 64), end};
}

Inputs make_profile(int d, int hq, int hkv, int n, const std::vector<GroupProfile>& groups, uint32_t seed) {
  Inputs in;
  in.d = d;
  in.hq = hq;
  in.hkv = hkv;
  in.n = n;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  const int group = hq / hkv;
  in.q.resize(size_t(hq) * d);
  in.k.resize(size_t(hkv) * n * d);
  in.v.resize(in.k.size());
  for (auto& x : in.v) x = round_bf16(unit(rng));
  for (int h = 0; h < hkv; ++h) {
    std::vector<float> c(d);
    double norm2 = 0;
    for (auto& x : c) {
      x = round_bf16(unit(rng));
      norm2 += x * x;
    }
    for (int a = h * group; a < (h + 1) * group; ++a)
      for (int i = 0; i < d; ++i) in.q[size_t(a) * d + i] = round_bf16(c[i] + 0.05f * unit(rng));
    std::vector<float> lambda(n, 0.f);
    const GroupProfile& p = groups[h % groups.size()];
    if (p.sinks_dominate) {
      for (int j = 0; j < std::min(4, n); ++j) lambda[j] = 16.f;
      for (int j = std::max(4, n - 48); j < n; ++j) lambda[j] = 10.f;
    }
    for (const int bump : p.bump_walk_blocks) {
      const auto [begin, end] = block_entries(bump, n);
      for (int j = begin; j < std::min(end, begin + 16); ++j) lambda[j] = 10.f;
    }
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < d; ++i)
        in.k[(size_t(h) * n + j) * d + i] =
            round_bf16(0.5f * unit(rng) + lambda[j] * c[i] * std::sqrt(float(d)) / float(norm2));
  }
  return in;
}

Inputs make_random(int d, int hq, int hkv, int n, uint32_t seed) {
  Inputs in;
  in.d = d;
  in.hq = hq;
  in.hkv = hkv;
  in.n = n;
  in.q = test::random_bf16_values(size_t(hq) * d, seed, 2.f);
  in.k = test::random_bf16_values(size_t(hkv) * n * d, seed + 1, 2.f);
  in.v = test::random_bf16_values(size_t(hkv) * n * d, seed + 2);
  return in;
}

kernels::EarlyExitOptions cpu_options(const cuda::EarlyExitDecodeOptions& o) {
  kernels::EarlyExitOptions c;
  c.tau = o.tau;
  c.phi = o.phi;
  c.patience = o.patience;
  c.block_size = cuda::kEarlyExitBlock;
  c.sink_tokens = o.sink_tokens;
  c.scale_criterion = o.scale_criterion == cuda::EarlyExitScale::kNorm
                          ? kernels::EarlyExitScaleCriterion::kNorm
                      : o.scale_criterion == cuda::EarlyExitScale::kChange
                          ? kernels::EarlyExitScaleCriterion::kChange
                          : kernels::EarlyExitScaleCriterion::kMass;
  c.use_scale = o.use_scale;
  c.use_direction = o.use_direction;
  c.enabled = o.enabled;
  return c;
}

struct Walk {
  std::vector<float> output;  // [heads, d]
  int visited = 0, total = 0;
  bool cpu_stopped_beyond_window = false;
};

// The CPU walk under the GPU's semantics: it may stop only at a walk block < window.
Walk expected_walk(kernels::EarlyExitAttentionArgs args, const cuda::EarlyExitDecodeOptions& options,
                   int window) {
  Walk walk;
  walk.output.resize(size_t(args.n_heads) * args.head_dim);
  args.output = walk.output.data();
  kernels::EarlyExitWalkStats stats;
  kernels::early_exit_attention(args, cpu_options(options), &stats);
  walk.total = static_cast<int>(stats.blocks_total);
  walk.visited = static_cast<int>(stats.blocks_visited);
  if (walk.visited > window) {
    walk.cpu_stopped_beyond_window = walk.visited < walk.total;
    kernels::EarlyExitOptions all = cpu_options(options);
    all.enabled = false;
    kernels::early_exit_attention(args, all, nullptr);
    walk.visited = walk.total;
  }
  return walk;
}

struct IndexLists {
  std::vector<int32_t> indices;  // per query head, ascending (store order)
  std::vector<float> bias;
  std::vector<int64_t> offset;
  std::vector<int32_t> count;
};

struct GpuResult {
  std::vector<float> output;  // [hq, d]
  std::vector<int32_t> state;  // [walkers, 4]
  unsigned long long totals[3] = {0, 0, 0};
  int chunk_blocks = 0, window = 0, splits = 0;  // the layout the call used (window: the decider's)
};

// chunk_blocks / decider_blocks as in EarlyExitDecodeArgs (0 = automatic).
GpuResult run_gpu(const Inputs& in, const cuda::EarlyExitDecodeOptions& options, int chunk_blocks,
                  const IndexLists* lists, int decider_blocks = 0) {
  auto d_q = test::to_device_bf16(in.q), d_k = test::to_device_bf16(in.k), d_v = test::to_device_bf16(in.v);
  std::vector<int64_t> offset(in.hkv);
  std::vector<int32_t> length(in.hkv, in.n);
  for (int h = 0; h < in.hkv; ++h) offset[h] = int64_t(h) * in.n;
  auto d_offset = test::to_device(offset), d_length = test::to_device(length);
  cuda::DeviceBuffer d_out(size_t(in.hq) * in.d * 2);
  cuda::DeviceBuffer workspace(cuda::early_exit_decode_workspace_floats(1, in.hq, in.d, in.n) * 4);
  cuda::DeviceBuffer d_indices, d_bias, d_index_offset, d_index_count;
  cuda::EarlyExitDecodeArgs ea;
  cuda::DecodeAttentionArgs& a = ea.attention;
  a.q = d_q.as<__nv_bfloat16>();
  a.q_seq_stride = int64_t(in.hq) * in.d;
  a.k = d_k.as<__nv_bfloat16>();
  a.v = d_v.as<__nv_bfloat16>();
  a.kv_offset = d_offset.as<int64_t>();
  a.kv_length = d_length.as<int32_t>();
  a.max_kv_length = in.n;
  if (lists) {
    d_indices = test::to_device(lists->indices);
    d_bias = test::to_device(lists->bias);
    d_index_offset = test::to_device(lists->offset);
    d_index_count = test::to_device(lists->count);
    a.indices = d_indices.as<int32_t>();
    a.logit_bias = d_bias.as<float>();
    a.index_offset = d_index_offset.as<int64_t>();
    a.index_count = d_index_count.as<int32_t>();
  }
  a.out = d_out.as<__nv_bfloat16>();
  a.out_seq_stride = int64_t(in.hq) * in.d;
  a.batch = 1;
  a.n_query_heads = in.hq;
  a.n_kv_heads = in.hkv;
  a.head_dim = in.d;
  a.scale = 1.f / std::sqrt(float(in.d));
  a.workspace = workspace.as<float>();
  const int walkers = cuda::early_exit_walkers(a);
  cuda::DeviceBuffer state(size_t(walkers) * cuda::kStateWords * 4), totals(3 * 8);
  cuda::check(cudaMemset(totals.data(), 0, 3 * 8), "memset");
  cuda::check(cudaMemset(state.data(), 0, state.bytes()), "memset");  // once per allocation
  ea.options = options;
  ea.walker_state = state.as<int32_t>();
  ea.totals = totals.as<unsigned long long>();
  ea.chunk_blocks = chunk_blocks;
  ea.decider_blocks = decider_blocks;
  GpuResult result;
  result.chunk_blocks = cuda::early_exit_chunk_blocks(ea);
  result.window = cuda::early_exit_decider_blocks(ea);
  result.splits = cuda::early_exit_splits(ea);
  cuda::early_exit_decode(ea, nullptr);
  cuda::check(cudaDeviceSynchronize(), "early_exit_decode");
  result.output = test::from_device_bf16(d_out, size_t(in.hq) * in.d);
  result.state.resize(size_t(walkers) * cuda::kStateWords);
  state.download(result.state.data(), result.state.size() * 4);
  totals.download(result.totals, 3 * 8);
  return result;
}

// Dense walks: one CPU walk per KV group.
std::vector<Walk> expected_dense(const Inputs& in, const cuda::EarlyExitDecodeOptions& options, int window) {
  std::vector<Walk> walks;
  const int group = in.hq / in.hkv;
  for (int h = 0; h < in.hkv; ++h) {
    kernels::EarlyExitAttentionArgs args;
    args.queries = in.q.data() + size_t(h) * group * in.d;
    args.n_heads = group;
    args.keys = in.k.data() + size_t(h) * in.n * in.d;
    args.values = in.v.data() + size_t(h) * in.n * in.d;
    args.n_entries = in.n;
    args.head_dim = in.d;
    walks.push_back(expected_walk(args, options, window));
  }
  return walks;
}

void expect_matches(const std::vector<Walk>& walks, const GpuResult& gpu, int heads_per_walker, int d) {
  for (size_t w = 0; w < walks.size(); ++w) {
    SCOPED_TRACE("walker " + std::to_string(w));
    EXPECT_EQ(gpu.state[w * cuda::kStateWords + cuda::kBlocksVisited], walks[w].visited);
    EXPECT_EQ(gpu.state[w * cuda::kStateWords + cuda::kBlocksTotal], walks[w].total);
    const int loaded = gpu.state[w * cuda::kStateWords + cuda::kBlocksLoaded];
    EXPECT_GE(loaded, walks[w].visited);
    EXPECT_LE(loaded, walks[w].total);
    const std::vector<float> got(gpu.output.begin() + w * heads_per_walker * d,
                                 gpu.output.begin() + (w + 1) * heads_per_walker * d);
    EXPECT_LT(test::max_abs_diff(got, walks[w].output), 1e-2);
  }
}

TEST(EarlyExitDecodeTest, ZeroThresholdsEqualFullAttentionAndDecodeAttention) {
  KVB_REQUIRE_GPU();
  struct Shape {
    int d, hq, hkv, n;
  };
  for (const Shape s : {Shape{128, 32, 8, 3001}, Shape{64, 9, 3, 130}, Shape{128, 4, 4, 3}, Shape{64, 8, 1, 700}}) {
    SCOPED_TRACE("d " + std::to_string(s.d) + " n " + std::to_string(s.n));
    const Inputs in = make_random(s.d, s.hq, s.hkv, s.n, 21);
    cuda::EarlyExitDecodeOptions options;
    options.tau = 0.f;
    options.phi = 0.f;
    const GpuResult gpu = run_gpu(in, options, 0, nullptr);
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
    auto d_q = test::to_device_bf16(in.q), d_k = test::to_device_bf16(in.k), d_v = test::to_device_bf16(in.v);
    std::vector<int64_t> offset(s.hkv);
    for (int h = 0; h < s.hkv; ++h) offset[h] = int64_t(h) * s.n;
    auto d_offset = test::to_device(offset), d_length = test::to_device(std::vector<int32_t>(s.hkv, s.n));
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

// Groups (patience 2): stops at block 3 (visited 4); bump at block 3 -> stops at block 5 (the
// window's last, visited 6); bumps at blocks 3 and 5 -> the CPU stops at block 7, beyond the
// window: full attention; no dominant entries: never stops.
const std::vector<GroupProfile> kMixedGroups = {{true, {}}, {true, {3}}, {true, {3, 5}}, {false, {}}};

class EarlyExitCriterionTest : public ::testing::TestWithParam<cuda::EarlyExitScale> {};

TEST_P(EarlyExitCriterionTest, DefaultsMatchTheCpuWalk) {
  KVB_REQUIRE_GPU();
  cuda::EarlyExitDecodeOptions options;  // tau 1e-5, phi 1e-3, patience 2, 4 sinks
  options.scale_criterion = GetParam();
  const int window = 6;
  const Inputs in = make_profile(128, 32, 8, 64 * 40 + 21, kMixedGroups, 5);
  const std::vector<Walk> walks = expected_dense(in, options, window);
  // The inputs must exercise every case, or the test proves nothing.
  int stopped = 0, beyond = 0, at_window_end = 0;
  for (const Walk& w : walks) {
    stopped += w.visited < w.total;
    beyond += w.cpu_stopped_beyond_window;
    at_window_end += w.visited == window;
  }
  ASSERT_GT(stopped, 0);
  ASSERT_GT(beyond, 0);
  ASSERT_GT(at_window_end, 0);
  ASSERT_LT(stopped, static_cast<int>(walks.size()));
  // The other splits' chunk equal to, smaller and larger than the decider's window.
  for (const int chunk : {window, 4, 11}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const GpuResult gpu = run_gpu(in, options, chunk, nullptr, window);
    ASSERT_EQ(gpu.window, window);
    ASSERT_EQ(gpu.chunk_blocks, chunk);
    const int blocks = walks[0].total;
    ASSERT_EQ(gpu.splits, 1 + (blocks - window + chunk - 1) / chunk);
    expect_matches(walks, gpu, 4, in.d);
  }
}

INSTANTIATE_TEST_SUITE_P(MassNormChange, EarlyExitCriterionTest,
                         ::testing::Values(cuda::EarlyExitScale::kMass, cuda::EarlyExitScale::kNorm,
                                           cuda::EarlyExitScale::kChange));

// Automatic chunks after an explicit decider window (the layout is uneven: the window is smaller
// than the other chunks), then the fully automatic layout.
TEST(EarlyExitDecodeTest, AutomaticChunksOnALongCacheMatchTheCpuWalk) {
  KVB_REQUIRE_GPU();
  cuda::EarlyExitDecodeOptions options;
  options.scale_criterion =
      cuda::EarlyExitScale::kMass;  // the profile's stops were designed under it
  options.patience = 3;
  const Inputs in = make_profile(128, 32, 8, 20000, kMixedGroups, 9);
  const int window = 5;  // the clean groups stop at walk block 4
  const GpuResult probe = run_gpu(in, options, 0, nullptr, window);
  const std::vector<Walk> walks = expected_dense(in, options, window);
  ASSERT_EQ(probe.window, window);
  ASSERT_GT(probe.chunk_blocks, window);  // 314 blocks over ~50 splits
  expect_matches(walks, probe, 4, in.d);
  unsigned long long visited = 0, total = 0;
  for (const Walk& w : walks) {
    visited += w.visited;
    total += w.total;
  }
  EXPECT_EQ(probe.totals[0], visited);
  EXPECT_EQ(probe.totals[1], total);
  EXPECT_LT(visited, total);

  const GpuResult automatic = run_gpu(in, options, 0, nullptr);
  SCOPED_TRACE("automatic window " + std::to_string(automatic.window));
  ASSERT_GE(automatic.window, 1);
  ASSERT_LE(automatic.window, automatic.chunk_blocks);
  expect_matches(expected_dense(in, options, automatic.window), automatic, 4, in.d);
}

TEST(EarlyExitDecodeTest, DisabledVisitsEveryBlock) {
  KVB_REQUIRE_GPU();
  cuda::EarlyExitDecodeOptions options;
  options.scale_criterion =
      cuda::EarlyExitScale::kMass;  // the profile's stops were designed under it
  const Inputs in = make_profile(128, 32, 8, 64 * 30 + 5, {{true, {}}}, 13);
  // With termination on every group stops early (so the disabled run has something to ignore).
  const GpuResult on = run_gpu(in, options, 8, nullptr);
  for (int h = 0; h < in.hkv; ++h)
    ASSERT_LT(on.state[h * cuda::kStateWords + cuda::kBlocksVisited],
              on.state[h * cuda::kStateWords + cuda::kBlocksTotal]);
  options.enabled = false;
  const GpuResult off = run_gpu(in, options, 8, nullptr);
  const std::vector<Walk> walks = expected_dense(in, options, 8);
  for (int h = 0; h < in.hkv; ++h) {
    EXPECT_EQ(off.state[h * cuda::kStateWords + cuda::kBlocksVisited], walks[h].total);
    EXPECT_EQ(off.state[h * cuda::kStateWords + cuda::kBlocksLoaded], walks[h].total);
  }
  expect_matches(walks, off, 4, in.d);
}

// Index lists: each query head walks its own ascending list (the 4 sinks except for every fourth
// head, a third of the middle, the last 40 entries) with a logit bias; the CPU walks the gathered
// entries of that head alone.
TEST(EarlyExitDecodeTest, IndexListsMatchTheCpuWalkOverTheSelection) {
  KVB_REQUIRE_GPU();
  const Inputs in = make_profile(128, 32, 8, 3000, kMixedGroups, 17);
  const int group = in.hq / in.hkv;
  IndexLists lists;
  std::mt19937 rng(3);
  for (int a = 0; a < in.hq; ++a) {
    lists.offset.push_back(static_cast<int64_t>(lists.indices.size()));
    int count = 0;
    for (int j = 0; j < in.n; ++j)
      if ((j < 4 && a % 4 != 3) || j >= in.n - 40 || rng() % 3 == 0) {
        lists.indices.push_back(j);
        lists.bias.push_back(float(int(rng() % 21) - 10) / 100.f);
        ++count;
      }
    lists.count.push_back(count);
  }
  for (const bool zero_thresholds : {false, true}) {
    SCOPED_TRACE(zero_thresholds ? "tau = phi = 0" : "defaults");
    cuda::EarlyExitDecodeOptions options;
    options.scale_criterion =
        cuda::EarlyExitScale::kMass;  // the profile's stops were designed under it
    if (zero_thresholds) options.tau = options.phi = 0.f;
    const int window = 5;
    std::vector<Walk> walks;
    for (int a = 0; a < in.hq; ++a) {
      const int m = lists.count[a];
      std::vector<float> keys(size_t(m) * in.d), values(keys.size());
      for (int i = 0; i < m; ++i) {
        const int j = lists.indices[lists.offset[a] + i];
        std::copy_n(in.k.data() + (size_t(a / group) * in.n + j) * in.d, in.d, keys.data() + size_t(i) * in.d);
        std::copy_n(in.v.data() + (size_t(a / group) * in.n + j) * in.d, in.d, values.data() + size_t(i) * in.d);
      }
      kernels::EarlyExitAttentionArgs args;
      args.queries = in.q.data() + size_t(a) * in.d;
      args.n_heads = 1;
      args.keys = keys.data();
      args.values = values.data();
      args.logit_bias = lists.bias.data() + lists.offset[a];
      args.n_entries = m;
      args.head_dim = in.d;
      walks.push_back(expected_walk(args, options, window));
    }
    int stopped = 0;
    for (const Walk& w : walks) stopped += w.visited < w.total;
    if (zero_thresholds) {
      EXPECT_EQ(stopped, 0);
    } else {
      ASSERT_GT(stopped, 0);
      ASSERT_LT(stopped, in.hq);
    }
    const GpuResult gpu = run_gpu(in, options, window, &lists);
    expect_matches(walks, gpu, 1, in.d);
  }
}

// The walk with the step's append (DecodeAppend) against rope_append_kv_decode followed by the
// plain walk, bit for bit over three chained steps: outputs, both caches, lengths and the walkers'
// state words. A profile cache (position 0: RoPE is the identity, the new keys copy a recent one)
// stops early with an 8-block window (the new entry in the decider); with a one-block window the
// new entry is in the first later split (and no stop is possible: patience 2 needs 3 blocks).
// Random caches of 2 entries (within the sinks; automatic layout) and 700 walk every block, with a
// QKV bias and a real rotation.
TEST(EarlyExitDecodeTest, FusedAppendMatchesSeparateAppend) {
  KVB_REQUIRE_GPU();
  struct Case {
    int n;
    bool profile;
    int decider_blocks;
  };
  for (const Case c : {Case{5000, true, 8}, Case{5000, true, 1}, Case{2, false, 0},
                       Case{700, false, 1}}) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " window " + std::to_string(c.decider_blocks));
    const int d = 128, hq = 32, hkv = 8, steps = 3, capacity = c.n + steps;
    const int width = (hq + 2 * hkv) * d;
    const Inputs in = c.profile ? make_profile(d, hq, hkv, c.n, {GroupProfile{}}, 71)
                                : make_random(d, hq, hkv, c.n, 72);
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
          .decider_blocks = c.decider_blocks};
    };
    Run fused = make_run(), separate = make_run();
    for (int step = 0; step < steps; ++step) {
      cuda::EarlyExitDecodeArgs ea = walk_for(fused, step);
      ea.attention.append = cuda::decode_append_for(rope, fused.k.as<__nv_bfloat16>(),
                                                    fused.v.as<__nv_bfloat16>(),
                                                    fused.lengths.as<int32_t>());
      cuda::early_exit_decode(ea, nullptr);

      test::append_separately(rope, separate.qkv[step], d_offsets, separate.lengths, separate.k,
                              separate.v);
      cuda::early_exit_decode(walk_for(separate, step), nullptr);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const test::AppendedRun got = test::expect_same_appends(fused, separate, hkv, k_cache.size(),
                                                            size_t(steps) * hq * d);
    EXPECT_EQ(got.lengths[0], c.n + steps);
    std::vector<int32_t> fused_state(size_t(hkv) * cuda::kStateWords), separate_state(fused_state);
    fused.state.download(fused_state.data(), fused_state.size() * 4);
    separate.state.download(separate_state.data(), separate_state.size() * 4);
    EXPECT_EQ(fused_state, separate_state);
    if (c.profile && c.decider_blocks >= 3) {  // stopped before the end: the stop path ran
      EXPECT_LT(fused_state[cuda::kBlocksVisited], fused_state[cuda::kBlocksTotal]);
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
}

// The engine's decode step with ART (graph-captured): with zero thresholds the logits equal the
// plain kernel's and every block is walked; with the defaults they stay close to the CPU engine
// running the same "full+art" plan (a random model's attention is diffuse, so neither stops).
TEST(EarlyExitDecodeTest, CudaEngineDecodeStepUsesTheWalk) {
  KVB_REQUIRE_GPU();
  const ModelConfig config = test::small_random_model("random-art", 2, 256, 64, 512, 1000);
  auto weights = random_weights(config, 7);
  const std::vector<int32_t> prompt = test::strided_token_ids(700, 53, 5, 1000);
  const std::vector<int32_t> continuation = {3, 500, 77};

  auto run = [&](const std::optional<EarlyExitParams>& art) {
    auto gpu = CudaEngine::from_weights(*weights);
    gpu->allocate_cache(1, static_cast<int>(prompt.size() + continuation.size()) + 4);
    gpu->prefill(0, prompt);
    gpu->set_early_exit(art);
    std::vector<std::vector<float>> logits;
    for (size_t step = 0; step < continuation.size(); ++step) {
      gpu->set_next_tokens({continuation[step]}, {static_cast<int>(prompt.size() + step)});
      gpu->decode_step(/*use_graph=*/true);
      logits.push_back(gpu->last_logits(0));
    }
    return std::make_pair(logits, gpu->early_exit_counts());
  };
  const auto [plain, no_counts] = run(std::nullopt);
  EXPECT_EQ(no_counts.total, 0);
  EarlyExitParams zero;
  zero.tau = zero.phi = 0.f;
  const auto [walked, counts] = run(zero);
  int64_t blocks = 0;
  for (size_t step = 0; step < continuation.size(); ++step)
    blocks += kernels::early_exit_block_count(static_cast<int>(prompt.size() + step + 1), {});
  blocks *= config.n_layers * config.n_kv_heads;
  EXPECT_EQ(counts.total, blocks);
  EXPECT_EQ(counts.visited, blocks);
  EXPECT_EQ(counts.loaded, blocks);
  for (size_t step = 0; step < plain.size(); ++step)
    EXPECT_LT(test::max_abs_diff(walked[step], plain[step]), 2e-2) << "step " << step;

  const auto [defaults, default_counts] = run(EarlyExitParams{});
  EXPECT_EQ(default_counts.total, blocks);
  CpuEngine cpu(*weights);
  KvStore store(config.n_layers, config.n_kv_heads, config.head_dim);
  cpu.forward_chunk(prompt, store, CaptureRequest{}, nullptr);
  CachePlan plan;
  plan.early_exit = EarlyExitParams{};
  for (size_t step = 0; step < continuation.size(); ++step) {
    const auto expected = cpu.decode_step(continuation[step], static_cast<int>(prompt.size() + step),
                                          static_cast<int>(step), store, plan);
    double scale = 0;
    for (float x : expected) scale = std::max(scale, double(std::abs(x)));
    EXPECT_LT(test::max_abs_diff(defaults[step], expected), 0.05 * scale) << "step " << step;
  }
  EXPECT_EQ(plan.early_exit_stats.blocks_total, blocks);

  EarlyExitParams wide_blocks;
  wide_blocks.block_size = 128;
  auto gpu = CudaEngine::from_weights(*weights);
  EXPECT_THROW(gpu->set_early_exit(wide_blocks), InputError);
}

}  // namespace
}  // namespace kvb
