// The CUDA attention kernels against their CPU twins (kernels/cpu/attention.h) over many shapes:
// head dims 64/128, GQA groups 1/3/4, chunk lengths not multiple of the tile, prefix offsets,
// ragged decode lengths including 1, index lists with logit bias.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/append_check.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

using test::random_bf16_values;

struct PrefillShape {
  int head_dim, n_query_heads, n_kv_heads, n_queries, prefix;
  int q_row_padding = 0;  // elements after each query row's heads
};

// Runs one prefill kernel on `s` and compares output and row log-sum-exp with the CPU reference.
void expect_prefill_matches_cpu(const PrefillShape& s, cuda::PrefillKernel kernel) {
  const int keys = s.prefix + s.n_queries;
  const int q_width = s.n_query_heads * s.head_dim;
  auto q = random_bf16_values(size_t(s.n_queries) * q_width, 1);
  auto k = random_bf16_values(size_t(s.n_kv_heads) * keys * s.head_dim, 2);
  auto v = random_bf16_values(size_t(s.n_kv_heads) * keys * s.head_dim, 3);

  kernels::CausalAttentionArgs cpu;
  cpu.n_query_heads = s.n_query_heads;
  cpu.n_kv_heads = s.n_kv_heads;
  cpu.head_dim = s.head_dim;
  cpu.n_queries = s.n_queries;
  cpu.queries = q.data();
  for (int h = 0; h < s.n_kv_heads; ++h) {
    cpu.keys.push_back(k.data() + size_t(h) * keys * s.head_dim);
    cpu.values.push_back(v.data() + size_t(h) * keys * s.head_dim);
    cpu.prefix.push_back(s.prefix);
  }
  std::vector<float> expected(size_t(s.n_queries) * q_width), expected_lse(size_t(s.n_query_heads) * s.n_queries);
  cpu.output = expected.data();
  cpu.row_log_sum_exp = expected_lse.data();
  kernels::causal_attention(cpu);

  const int q_stride = q_width + s.q_row_padding;
  std::vector<float> q_rows(size_t(s.n_queries) * q_stride, 0.f);
  for (int i = 0; i < s.n_queries; ++i)
    std::copy_n(q.begin() + size_t(i) * q_width, q_width, q_rows.begin() + size_t(i) * q_stride);
  auto d_q = test::to_device_bf16(q_rows), d_k = test::to_device_bf16(k),
       d_v = test::to_device_bf16(v);
  cuda::DeviceBuffer d_out(expected.size() * 2), d_lse(expected_lse.size() * 4);
  cuda::PrefillAttentionArgs gpu;
  gpu.q = d_q.as<__nv_bfloat16>();
  gpu.q_row_stride = q_stride;
  gpu.k = d_k.as<__nv_bfloat16>();
  gpu.v = d_v.as<__nv_bfloat16>();
  gpu.kv_head_stride = int64_t(keys) * s.head_dim;
  gpu.out = d_out.as<__nv_bfloat16>();
  gpu.out_row_stride = q_width;
  gpu.lse = d_lse.as<float>();
  gpu.n_queries = s.n_queries;
  gpu.query_offset = s.prefix;
  gpu.n_query_heads = s.n_query_heads;
  gpu.n_kv_heads = s.n_kv_heads;
  gpu.head_dim = s.head_dim;
  gpu.scale = 1.0f / std::sqrt(float(s.head_dim));
  gpu.kernel = kernel;
  cuda::DeviceBuffer workspace;
  if (kernel == cuda::PrefillKernel::kSplitKv) {
    workspace = cuda::DeviceBuffer(cuda::prefill_split_kv_workspace_bytes(gpu));
    gpu.workspace = workspace.data();
  }
  cuda::flash_attention_prefill(gpu, nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  auto got = test::from_device_bf16(d_out, expected.size());
  std::vector<float> got_lse(expected_lse.size());
  d_lse.download(got_lse.data(), got_lse.size() * 4);
  // bf16 output rounding (2^-8 relative) plus bf16 probabilities in the PV product.
  EXPECT_LT(test::max_abs_diff(got, expected), 2e-2);
  EXPECT_LT(test::max_abs_diff(got_lse, expected_lse), 2e-3);
}

// The mma.sync kernel (every GPU; the only one for head_dim 64).
class FlashPrefillTest : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(FlashPrefillTest, MatchesCpuReference) {
  KVB_REQUIRE_GPU();
  expect_prefill_matches_cpu(GetParam(), cuda::PrefillKernel::kMmaSync);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashPrefillTest,
                         ::testing::Values(PrefillShape{64, 9, 3, 1, 0}, PrefillShape{64, 9, 3, 37, 0},
                                           PrefillShape{64, 4, 4, 130, 0}, PrefillShape{128, 8, 2, 200, 0},
                                           PrefillShape{128, 32, 8, 65, 100}, PrefillShape{128, 4, 1, 300, 1},
                                           PrefillShape{64, 6, 2, 64, 64}));

// The Hopper wgmma kernel (128-row query tiles, 128-key tiles): lengths and prefixes on and off
// the tile grid, GQA groups 1/3/4, one query, several query tiles with a long prefix.
class WgmmaPrefillTest : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(WgmmaPrefillTest, MatchesCpuReference) {
  KVB_REQUIRE_GPU();
  if (!cuda::wgmma_prefill_available(128)) GTEST_SKIP() << "wgmma prefill needs an sm_90 GPU";
  expect_prefill_matches_cpu(GetParam(), cuda::PrefillKernel::kWgmma);
}

INSTANTIATE_TEST_SUITE_P(Shapes, WgmmaPrefillTest,
                         ::testing::Values(PrefillShape{128, 8, 2, 1, 0}, PrefillShape{128, 8, 2, 128, 0},
                                           PrefillShape{128, 8, 2, 200, 0}, PrefillShape{128, 4, 4, 257, 0},
                                           PrefillShape{128, 32, 8, 65, 100}, PrefillShape{128, 4, 1, 300, 1},
                                           PrefillShape{128, 9, 3, 383, 517}, PrefillShape{128, 8, 2, 640, 1400},
                                           PrefillShape{128, 4, 1, 1, 700}));

// The split-KV path (each query a decode query of its own causal length): DropKV's window shape
// (8 queries after a long prefix, Llama GQA), one query, 16 queries on head_dim 64 with groups of
// 3, a prefix shorter than a split.
class SplitKvPrefillTest : public ::testing::TestWithParam<PrefillShape> {};

TEST_P(SplitKvPrefillTest, MatchesCpuReference) {
  KVB_REQUIRE_GPU();
  expect_prefill_matches_cpu(GetParam(), cuda::PrefillKernel::kSplitKv);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SplitKvPrefillTest,
                         ::testing::Values(PrefillShape{128, 32, 8, 8, 5000},
                                           PrefillShape{128, 8, 2, 1, 3000},
                                           PrefillShape{64, 9, 3, 16, 2100},
                                           PrefillShape{128, 4, 4, 3, 70}));

// Refused before any CUDA call (runs without a GPU too).
TEST(FlashPrefill, SplitKvNeedsAWorkspace) {
  cuda::PrefillAttentionArgs a;
  a.n_queries = 8;
  a.head_dim = 128;
  a.n_query_heads = a.n_kv_heads = 1;
  a.kernel = cuda::PrefillKernel::kSplitKv;
  EXPECT_THROW(cuda::flash_attention_prefill(a, nullptr), std::invalid_argument);
}

// Both kernels move rows in 16-byte pieces: a query stride off that grid is refused before any
// launch (a misaligned-address fault would poison the context), and the GPU stays usable.
TEST(FlashPrefill, RefusesRowsOffThe16ByteGrid) {
  KVB_REQUIRE_GPU();
  const PrefillShape padded{128, 8, 2, 200, 60, 4};
  EXPECT_THROW(expect_prefill_matches_cpu(padded, cuda::PrefillKernel::kAuto),
               std::invalid_argument);
  EXPECT_THROW(expect_prefill_matches_cpu(padded, cuda::PrefillKernel::kMmaSync),
               std::invalid_argument);
  expect_prefill_matches_cpu(PrefillShape{128, 8, 2, 200, 60, 8}, cuda::PrefillKernel::kAuto);
}

// Both kernels on one long causal prefill (several KV heads, 32 query tiles): they agree within
// bf16 rounding, and the wgmma kernel is what kAuto picks on this GPU.
TEST(WgmmaPrefill, AgreesWithMmaSyncAt4096Tokens) {
  KVB_REQUIRE_GPU();
  if (!cuda::wgmma_prefill_available(128)) GTEST_SKIP() << "wgmma prefill needs an sm_90 GPU";
  constexpr int kQueries = 4096, kHeadsQ = 8, kHeadsKv = 2, kDim = 128;
  auto q = random_bf16_values(size_t(kQueries) * kHeadsQ * kDim, 4);
  auto k = random_bf16_values(size_t(kHeadsKv) * kQueries * kDim, 5);
  auto v = random_bf16_values(size_t(kHeadsKv) * kQueries * kDim, 6);
  auto d_q = test::to_device_bf16(q), d_k = test::to_device_bf16(k), d_v = test::to_device_bf16(v);
  auto run = [&](cuda::PrefillKernel kernel, std::vector<float>& lse) {
    cuda::DeviceBuffer d_out(q.size() * 2), d_lse(size_t(kHeadsQ) * kQueries * 4);
    cuda::PrefillAttentionArgs a;
    a.q = d_q.as<__nv_bfloat16>();
    a.q_row_stride = kHeadsQ * kDim;
    a.k = d_k.as<__nv_bfloat16>();
    a.v = d_v.as<__nv_bfloat16>();
    a.kv_head_stride = int64_t(kQueries) * kDim;
    a.out = d_out.as<__nv_bfloat16>();
    a.out_row_stride = kHeadsQ * kDim;
    a.lse = d_lse.as<float>();
    a.n_queries = kQueries;
    a.n_query_heads = kHeadsQ;
    a.n_kv_heads = kHeadsKv;
    a.head_dim = kDim;
    a.scale = 1.0f / std::sqrt(float(kDim));
    a.kernel = kernel;
    cuda::flash_attention_prefill(a, nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    lse.resize(size_t(kHeadsQ) * kQueries);
    d_lse.download(lse.data(), lse.size() * 4);
    return test::from_device_bf16(d_out, q.size());
  };
  std::vector<float> lse_mma, lse_wgmma, lse_auto;
  const auto mma = run(cuda::PrefillKernel::kMmaSync, lse_mma);
  const auto wgmma = run(cuda::PrefillKernel::kWgmma, lse_wgmma);
  const auto automatic = run(cuda::PrefillKernel::kAuto, lse_auto);
  EXPECT_LT(test::max_abs_diff(mma, wgmma), 2e-2);
  EXPECT_LT(test::max_abs_diff(lse_mma, lse_wgmma), 2e-3);
  EXPECT_EQ(test::max_abs_diff(automatic, wgmma), 0.0);
}

enum class Lists { kNone, kPerHead, kSharedByGroup };

struct DecodeShape {
  int head_dim, n_query_heads, n_kv_heads;
  std::vector<int> lengths;  // per sequence (every head of a sequence gets length + h)
  Lists lists;
};

class DecodeAttentionTest : public ::testing::TestWithParam<DecodeShape> {};

TEST_P(DecodeAttentionTest, MatchesCpuReference) {
  KVB_REQUIRE_GPU();
  const DecodeShape s = GetParam();
  const int batch = static_cast<int>(s.lengths.size());
  const int d = s.head_dim, hq = s.n_query_heads, hkv = s.n_kv_heads, group = hq / hkv;
  std::vector<int64_t> offset(batch * hkv);
  std::vector<int32_t> length(batch * hkv);
  int64_t rows = 0;
  int max_length = 0;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      offset[b * hkv + h] = rows;
      length[b * hkv + h] = s.lengths[b] + h;
      rows += length[b * hkv + h] + 3;  // gaps between heads, as after compaction with spare room
      max_length = std::max(max_length, length[b * hkv + h]);
    }
  auto k = random_bf16_values(rows * d, 11, 2.0f);
  auto v = random_bf16_values(rows * d, 12);
  auto q = random_bf16_values(size_t(batch) * hq * d, 13, 2.0f);

  std::vector<int32_t> indices;
  std::vector<float> bias;
  std::vector<int64_t> index_offset(batch * hq);
  std::vector<int32_t> index_count(batch * hq);
  std::mt19937 rng(5);
  const bool indexed = s.lists != Lists::kNone, shared = s.lists == Lists::kSharedByGroup;
  if (indexed) {
    for (int b = 0; b < batch; ++b)
      for (int a = 0; a < hq; ++a) {
        const int n = length[b * hkv + a / group];
        if (shared && a % group != 0) {  // the group's first head's list
          index_offset[b * hq + a] = index_offset[b * hq + a - a % group];
          index_count[b * hq + a] = index_count[b * hq + a - a % group];
          continue;
        }
        index_offset[b * hq + a] = indices.size();
        int count = 0;
        for (int i = n - 1; i >= 0; --i)
          if (rng() % 3 == 0 || i == n - 1) {
            indices.push_back(i);
            bias.push_back(float(rng() % 100) / 50.f - 1.f);
            ++count;
          }
        index_count[b * hq + a] = count;
      }
  }

  std::vector<float> expected(size_t(batch) * hq * d);
  for (int b = 0; b < batch; ++b)
    for (int a = 0; a < hq; ++a) {
      const int slot = b * hkv + a / group;
      kernels::DecodeAttentionArgs cpu;
      cpu.query = q.data() + (size_t(b) * hq + a) * d;
      cpu.keys = k.data() + offset[slot] * d;
      cpu.values = v.data() + offset[slot] * d;
      cpu.n_entries = length[slot];
      cpu.head_dim = d;
      if (indexed) {
        cpu.indices = indices.data() + index_offset[b * hq + a];
        cpu.n_indices = index_count[b * hq + a];
        if (!shared) cpu.logit_bias = bias.data() + index_offset[b * hq + a];
      }
      cpu.output = expected.data() + (size_t(b) * hq + a) * d;
      kernels::decode_attention(cpu);
    }

  auto d_q = test::to_device_bf16(q), d_k = test::to_device_bf16(k), d_v = test::to_device_bf16(v);
  auto d_offset = test::to_device(offset);
  auto d_length = test::to_device(length);
  auto d_indices = test::to_device(indices.empty() ? std::vector<int32_t>{0} : indices);
  auto d_bias = test::to_device(bias.empty() ? std::vector<float>{0} : bias);
  auto d_index_offset = test::to_device(index_offset);
  auto d_index_count = test::to_device(index_count);
  cuda::DeviceBuffer d_out(expected.size() * 2);
  cuda::DeviceBuffer workspace(cuda::decode_attention_workspace_floats(batch, hq, d, max_length) * 4);
  cuda::DecodeAttentionArgs gpu;
  gpu.q = d_q.as<__nv_bfloat16>();
  gpu.q_seq_stride = int64_t(hq) * d;
  gpu.k = d_k.as<__nv_bfloat16>();
  gpu.v = d_v.as<__nv_bfloat16>();
  gpu.kv_offset = d_offset.as<int64_t>();
  gpu.kv_length = d_length.as<int32_t>();
  gpu.max_kv_length = max_length;
  if (indexed) {
    gpu.indices = d_indices.as<int32_t>();
    gpu.index_offset = d_index_offset.as<int64_t>();
    gpu.index_count = d_index_count.as<int32_t>();
    if (shared)
      gpu.shared_group_lists = true;
    else
      gpu.logit_bias = d_bias.as<float>();
  }
  gpu.out = d_out.as<__nv_bfloat16>();
  gpu.out_seq_stride = int64_t(hq) * d;
  gpu.batch = batch;
  gpu.n_query_heads = hq;
  gpu.n_kv_heads = hkv;
  gpu.head_dim = d;
  gpu.scale = 1.0f / std::sqrt(float(d));
  gpu.workspace = workspace.as<float>();
  // The automatic split, and 64-key chunks (many partials to merge).
  for (int chunk : {0, 64}) {
    gpu.chunk_size = chunk;
    cuda::check(cudaMemset(d_out.data(), 0xff, d_out.bytes()), "memset");
    // NaN in every partial slot: a merge that folds in a split no kernel wrote this call shows it.
    cuda::check(cudaMemset(workspace.data(), 0xff, workspace.bytes()), "memset");
    cuda::decode_attention(gpu, nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    auto got = test::from_device_bf16(d_out, expected.size());
    EXPECT_LT(test::max_abs_diff(got, expected), 1e-2) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeAttentionTest,
    ::testing::Values(DecodeShape{64, 9, 3, {1, 300, 1000}, Lists::kNone},
                      DecodeShape{128, 32, 8, {4096}, Lists::kNone},
                      DecodeShape{128, 8, 2, {1, 257, 5000}, Lists::kNone},
                      DecodeShape{128, 4, 4, {700}, Lists::kNone},
                      DecodeShape{128, 32, 8, {0, 130, 20000}, Lists::kNone},
                      DecodeShape{64, 9, 3, {1, 300, 1000}, Lists::kPerHead},
                      DecodeShape{128, 32, 8, {2000, 5}, Lists::kPerHead},
                      // The group's heads share each list: gathered tiles of the dense kernel.
                      DecodeShape{64, 9, 3, {1, 300, 1000}, Lists::kSharedByGroup},
                      DecodeShape{128, 32, 8, {6000, 5}, Lists::kSharedByGroup},
                      // 400 rows of short heads: more blocks than are resident at once (the
                      // many-waves form of the dense kernel).
                      DecodeShape{128, 8, 2, std::vector<int>(200, 150), Lists::kNone}));

// decode_attention with the step's append (DecodeAppend) against rope_append_kv_decode followed by
// plain decode_attention, bit for bit over three chained steps: outputs, both caches and lengths.
// Chunks of 64 keys put the new entry at the start, middle and end of a chunk across heads and
// steps; head_dim 128 (group 4, with a QKV bias) and 64 (group 3, interleaved pairs, no bias).
struct AppendShape {
  int head_dim, n_query_heads, n_kv_heads;
  bool bias, interleaved;
  int batch;
};

class DecodeAppendTest : public ::testing::TestWithParam<AppendShape> {};

TEST_P(DecodeAppendTest, MatchesSeparateAppend) {
  KVB_REQUIRE_GPU();
  const AppendShape s = GetParam();
  const int batch = s.batch, d = s.head_dim, hq = s.n_query_heads, hkv = s.n_kv_heads,
            capacity = 200, steps = 3;
  const int width = (hq + 2 * hkv) * d;
  std::vector<int64_t> offsets(batch * hkv);
  std::vector<int32_t> lengths(batch * hkv);
  for (int i = 0; i < batch * hkv; ++i) {
    offsets[i] = int64_t(i) * capacity;
    lengths[i] = 60 + 31 * i % 130;  // 60, 91, 122, 153, ...: the entry lands anywhere in a chunk
  }
  auto d_inv_freq = test::to_device(kernels::rope_inverse_frequencies(d, 10000.f));
  std::vector<int32_t> positions(batch);
  for (int b = 0; b < batch; ++b) positions[b] = 300 - 283 * (b % 2) + b;
  auto d_positions = test::to_device(positions);
  auto d_bias = test::to_device_bf16(random_bf16_values(width, 30, 0.1f));
  auto d_offsets = test::to_device(offsets);
  const auto cache_values = random_bf16_values(size_t(batch) * hkv * capacity * d, 31);
  std::vector<std::vector<float>> rows;
  for (int step = 0; step < steps; ++step)
    rows.push_back(random_bf16_values(size_t(batch) * width, 40 + step, 2.f));

  struct Run {
    cuda::DeviceBuffer lengths, k, v, out, workspace;
    std::vector<cuda::DeviceBuffer> qkv;
  };
  auto make_run = [&] {
    Run r{test::to_device(lengths),
          test::to_device_bf16(cache_values),
          test::to_device_bf16(cache_values),
          cuda::DeviceBuffer(size_t(steps) * batch * hq * d * 2),
          cuda::DeviceBuffer(cuda::decode_attention_workspace_floats(batch, hq, d, capacity) * 4),
          {}};
    for (const auto& row : rows) r.qkv.push_back(test::to_device_bf16(row));
    return r;
  };
  auto attention_for = [&](Run& r, int step) {
    return cuda::DecodeAttentionArgs{
        .q = r.qkv[step].as<__nv_bfloat16>(),
        .q_seq_stride = width,
        .k = r.k.as<__nv_bfloat16>(),
        .v = r.v.as<__nv_bfloat16>(),
        .kv_offset = d_offsets.as<int64_t>(),
        .kv_length = r.lengths.as<int32_t>(),
        .max_kv_length = capacity,
        .out = r.out.as<__nv_bfloat16>() + size_t(step) * batch * hq * d,
        .out_seq_stride = int64_t(hq) * d,
        .batch = batch,
        .n_query_heads = hq,
        .n_kv_heads = hkv,
        .head_dim = d,
        .scale = 1.f / std::sqrt(float(d)),
        .workspace = r.workspace.as<float>(),
        .chunk_size = 64,
        .append = {}};
  };
  const cuda::RopeArgs rope{.bias = s.bias ? d_bias.as<__nv_bfloat16>() : nullptr,
                            .positions = d_positions.as<int32_t>(),
                            .inv_freq = d_inv_freq.as<float>(),
                            .n = batch,
                            .n_query_heads = hq,
                            .n_kv_heads = hkv,
                            .head_dim = d,
                            .interleaved = s.interleaved};

  Run fused = make_run(), separate = make_run();
  for (int step = 0; step < steps; ++step) {
    cuda::DecodeAttentionArgs a = attention_for(fused, step);
    a.append = cuda::decode_append_for(rope, fused.k.as<__nv_bfloat16>(),
                                       fused.v.as<__nv_bfloat16>(), fused.lengths.as<int32_t>());
    cuda::decode_attention(a, nullptr);

    test::append_separately(rope, separate.qkv[step], d_offsets, separate.lengths, separate.k,
                            separate.v);
    cuda::decode_attention(attention_for(separate, step), nullptr);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const size_t outputs = size_t(steps) * batch * hq * d;
  const test::AppendedRun got = test::expect_same_appends(fused, separate, lengths.size(),
                                                          cache_values.size(), outputs);
  EXPECT_EQ(got.lengths[0], lengths[0] + steps);
  EXPECT_GT(test::max_abs_diff(got.outputs, std::vector<float>(outputs, 0.f)), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAppendTest,
                         ::testing::Values(AppendShape{128, 32, 8, true, false, 2},
                                           AppendShape{64, 9, 3, false, true, 2},
                                           AppendShape{128, 8, 2, true, false,
                                                       200}));  // many waves

}  // namespace
}  // namespace kvb
