// The ART decode kernel's test harness (kernels/cuda/early_exit_decode.h against the CPU walk,
// kernels/cpu/early_exit_decode.h), shared by its own test (early_exit_decode_test.cc) and the
// backend-ops test (backend_ops_attention.h): inputs, the CPU walks, one GPU call with its graph
// replays, and the comparison.
//
// Attention profile of the "sink and recent dominate" inputs (make_profile): the query heads of a
// KV group share a direction c (q_a = c + small noise); key j = noise + lambda_j * c *
// sqrt(d)/|c|^2, so its logit is about lambda_j: 16 for the 4 sink entries, 10 for the 48 most
// recent ones, ~0 elsewhere. A "bump" puts 16 entries of logit 10 inside one walk block, which
// resets the heads' counters there; with patience 2 a walk whose last bump is at block L stops
// after block L + 2 (visited L + 3), and with no bump after block 3. A group without sinks has no
// dominant entries and never stops.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/early_exit_decode.h"
#include "kernels/cuda/early_exit_decode.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

struct GroupProfile {
  bool sinks_dominate = true;
  std::vector<int> bump_walk_blocks;  // walk blocks holding 16 extra entries of logit 10
};

// Bumps at walk blocks 3, 5, ..., last (odd): the walk stops after block last + 2.
inline GroupProfile stopping_after(int last_bump) {
  GroupProfile p;
  for (int w = 3; w <= last_bump; w += 2) p.bump_walk_blocks.push_back(w);
  return p;
}

// Cache of one sequence: per KV head n entries, stored head after head.
struct Inputs {
  int d = 128, hq = 32, hkv = 8, n = 0;
  std::vector<float> q, k, v;  // q [hq, d]; k, v [hkv, n, d]
};

// Entries [begin, end) of walk block w with 4 sinks and 64-entry blocks (the CPU walk's order).
inline std::pair<int, int> block_entries(int w, int n) {
  if (w == 0) return {0, std::min(4, n)};
  const int end = n - (w - 1) * 64;
  return {std::max(4, end - 64), end};
}

inline Inputs make_profile(int d, int hq, int hkv, int n, const std::vector<GroupProfile>& groups,
                           uint32_t seed) {
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
    const int blocks = kernels::early_exit_block_count(n, kernels::EarlyExitOptions{});
    for (const int bump : p.bump_walk_blocks) {
      if (bump >= blocks) continue;
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

inline Inputs make_random(int d, int hq, int hkv, int n, uint32_t seed) {
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

inline kernels::EarlyExitOptions cpu_options(const cuda::EarlyExitDecodeOptions& o) {
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
  c.decision_window = o.decision_window;
  c.enabled = o.enabled;
  return c;
}

struct Walk {
  std::vector<float> output;  // [heads, d]
  int visited = 0, total = 0;
};

// The CPU walk: the GPU's expectation, exactly.
inline Walk expected_walk(kernels::EarlyExitDecodeArgs args,
                          const cuda::EarlyExitDecodeOptions& options) {
  Walk walk;
  walk.output.resize(size_t(args.n_heads) * args.head_dim);
  args.output = walk.output.data();
  kernels::EarlyExitWalkStats stats;
  kernels::early_exit_decode(args, cpu_options(options), &stats);
  walk.total = static_cast<int>(stats.blocks_total);
  walk.visited = static_cast<int>(stats.blocks_visited);
  return walk;
}

// Dense walks: one CPU walk per KV group, sequence after sequence.
inline std::vector<Walk> expected_dense(const std::vector<Inputs>& batch,
                                        const cuda::EarlyExitDecodeOptions& options) {
  std::vector<Walk> walks;
  for (const Inputs& in : batch) {
    const int group = in.hq / in.hkv;
    for (int h = 0; h < in.hkv; ++h) {
      kernels::EarlyExitDecodeArgs args;
      args.queries = in.q.data() + size_t(h) * group * in.d;
      args.n_heads = group;
      args.keys = in.k.data() + size_t(h) * in.n * in.d;
      args.values = in.v.data() + size_t(h) * in.n * in.d;
      args.n_entries = in.n;
      args.head_dim = in.d;
      walks.push_back(expected_walk(args, options));
    }
  }
  return walks;
}

struct IndexLists {
  std::vector<int32_t> indices;  // per query head, ascending (store order)
  std::vector<float> bias;
  std::vector<int64_t> offset;
  std::vector<int32_t> count;
};

struct GpuResult {
  std::vector<float> output;   // [batch, hq, d]
  std::vector<int32_t> state;  // [walkers, kStateWords]
  unsigned long long totals[3] = {0, 0, 0};
  int chunk_blocks = 0, splits = 0, segment_blocks = 0, segments = 0;  // the layout the call used
};

struct Layout {
  int chunk_blocks = 0, segment_blocks = 0;  // 0 = automatic
};

// One call on a batch of sequences (same shape, any lengths), then two replays of a CUDA graph
// holding the same call, each of which must give the same words and outputs, bit for bit (the
// counters reset themselves; nothing in the call waits on the host).
inline GpuResult run_gpu(const std::vector<Inputs>& batch,
                         const cuda::EarlyExitDecodeOptions& options, Layout layout,
                         const IndexLists* lists = nullptr) {
  const Inputs& first = batch.front();
  const int d = first.d, hq = first.hq, hkv = first.hkv, n_seq = static_cast<int>(batch.size());
  std::vector<float> q, k, v;
  std::vector<int64_t> offset;
  std::vector<int32_t> length;
  int max_n = 1;
  for (const Inputs& in : batch) {
    q.insert(q.end(), in.q.begin(), in.q.end());
    for (int h = 0; h < hkv; ++h) {
      offset.push_back(static_cast<int64_t>(k.size() / d));
      length.push_back(in.n);
      k.insert(k.end(), in.k.begin() + size_t(h) * in.n * d,
               in.k.begin() + size_t(h + 1) * in.n * d);
      v.insert(v.end(), in.v.begin() + size_t(h) * in.n * d,
               in.v.begin() + size_t(h + 1) * in.n * d);
    }
    max_n = std::max(max_n, in.n);
  }
  if (k.empty()) k.assign(size_t(d), 0.f), v.assign(size_t(d), 0.f);  // empty caches need a pointer
  auto d_q = test::to_device_bf16(q), d_k = test::to_device_bf16(k), d_v = test::to_device_bf16(v);
  auto d_offset = test::to_device(offset), d_length = test::to_device(length);
  const size_t out_values = size_t(n_seq) * hq * d;
  cuda::DeviceBuffer d_out(out_values * 2);
  cuda::DeviceBuffer workspace(cuda::early_exit_decode_workspace_floats(n_seq, hq, d, max_n) * 4);
  cuda::DeviceBuffer d_indices, d_bias, d_index_offset, d_index_count;
  cuda::EarlyExitDecodeArgs ea;
  cuda::DecodeAttentionArgs& a = ea.attention;
  a.q = d_q.as<__nv_bfloat16>();
  a.q_seq_stride = int64_t(hq) * d;
  a.k = d_k.as<__nv_bfloat16>();
  a.v = d_v.as<__nv_bfloat16>();
  a.kv_offset = d_offset.as<int64_t>();
  a.kv_length = d_length.as<int32_t>();
  a.max_kv_length = max_n;
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
  a.out_seq_stride = int64_t(hq) * d;
  a.batch = n_seq;
  a.n_query_heads = hq;
  a.n_kv_heads = hkv;
  a.head_dim = d;
  a.scale = 1.f / std::sqrt(float(d));
  a.workspace = workspace.as<float>();
  const int walkers = cuda::early_exit_walkers(a);
  cuda::DeviceBuffer state(size_t(walkers) * cuda::kStateWords * 4), totals(3 * 8);
  cuda::check(cudaMemset(totals.data(), 0, 3 * 8), "memset");
  cuda::check(cudaMemset(state.data(), 0, state.bytes()), "memset");  // once per allocation
  ea.options = options;
  ea.walker_state = state.as<int32_t>();
  ea.totals = totals.as<unsigned long long>();
  ea.chunk_blocks = layout.chunk_blocks;
  ea.segment_blocks = layout.segment_blocks;
  GpuResult result;
  result.chunk_blocks = cuda::early_exit_chunk_blocks(ea);
  result.splits = cuda::early_exit_splits(ea);
  result.segment_blocks = cuda::early_exit_segment_blocks(ea);
  result.segments = cuda::early_exit_segments(ea);
  cuda::early_exit_decode(ea, nullptr);
  cuda::check(cudaDeviceSynchronize(), "early_exit_decode");
  result.output = test::from_device_bf16(d_out, out_values);
  result.state.resize(size_t(walkers) * cuda::kStateWords);
  state.download(result.state.data(), result.state.size() * 4);
  totals.download(result.totals, 3 * 8);

  cudaStream_t stream;
  cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
  cuda::early_exit_decode(ea, stream);
  cuda::check(cudaStreamEndCapture(stream, &graph), "capture");
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int replay = 0; replay < 2; ++replay) {
    cuda::check(cudaMemsetAsync(d_out.data(), 0, d_out.bytes(), stream), "memset");
    cuda::check(cudaGraphLaunch(exec, stream), "replay");
    cuda::check(cudaStreamSynchronize(stream), "replay");
    std::vector<int32_t> words(result.state.size());
    state.download(words.data(), words.size() * 4);
    EXPECT_EQ(words, result.state) << "graph replay " << replay;
    EXPECT_EQ(test::max_abs_diff(test::from_device_bf16(d_out, out_values), result.output), 0.0)
        << "graph replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return result;
}

// Walker w's words and output (heads_per_walker query heads) against the CPU walk.
inline void expect_matches(const std::vector<Walk>& walks, const GpuResult& gpu,
                           int heads_per_walker, int d) {
  unsigned long long visited = 0, total = 0;
  for (size_t w = 0; w < walks.size(); ++w) {
    SCOPED_TRACE("walker " + std::to_string(w) + " (CPU visits " +
                 std::to_string(walks[w].visited) + " of " + std::to_string(walks[w].total) + ")");
    EXPECT_EQ(gpu.state[w * cuda::kStateWords + cuda::kBlocksVisited], walks[w].visited);
    EXPECT_EQ(gpu.state[w * cuda::kStateWords + cuda::kBlocksTotal], walks[w].total);
    EXPECT_EQ(gpu.state[w * cuda::kStateWords + cuda::kBlocksLoaded], walks[w].total);
    EXPECT_EQ(gpu.state[w * cuda::kStateWords + cuda::kDecideArrivals], 0);
    for (int s = 0; s < cuda::kMaxSegments; ++s)
      ASSERT_EQ(gpu.state[w * cuda::kStateWords + cuda::kSegmentArrivals + s], 0)
          << "segment " << s;
    const std::vector<float> got(gpu.output.begin() + w * heads_per_walker * d,
                                 gpu.output.begin() + (w + 1) * heads_per_walker * d);
    EXPECT_LT(test::max_abs_diff(got, walks[w].output), 1e-2);
    visited += walks[w].visited;
    total += walks[w].total;
  }
  EXPECT_EQ(gpu.totals[0], visited);
  EXPECT_EQ(gpu.totals[1], total);
  EXPECT_EQ(gpu.totals[2], total);
}

}  // namespace kvb::test
