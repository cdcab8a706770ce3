// The backend-ops rows of the attention kernels (tests/cuda/backend_ops_test.cc, whose header says
// why each tolerance is what it is): prefill_attention against prefill_attention (each of its
// kernels), decode_attention (dense, per-head lists with a logit bias, lists shared by the group)
// against the CPU's, attention_column_sums, window_attention_sums (with and without the bf16
// reference's casts), dropkv_scores (and its materialising baseline) and early_exit_decode against
// their twins.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_column_sums.h"
#include "kernels/cpu/dropkv_scores.h"
#include "kernels/cpu/window_attention_sums.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_column_sums.h"
#include "kernels/cuda/dropkv_scores.h"
#include "kernels/cuda/window_attention_sums.h"
#include "tests/cuda/backend_ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/early_exit_check.h"
#include "tests/kernels/softmax_row.h"

namespace kvb::test {

struct PrefillShape {
  int head_dim, n_query_heads, n_kv_heads, n_queries, prefix;
  int q_row_padding = 0;  // elements after each query row's heads
};

inline const char* prefill_kernel_name(cuda::PrefillKernel kernel) {
  switch (kernel) {
    case cuda::PrefillKernel::kMmaSync:
      return "mma";
    case cuda::PrefillKernel::kWgmma:
      return "wgmma";
    case cuda::PrefillKernel::kSplitKv:
      return "split_kv";
    case cuda::PrefillKernel::kAuto:
      break;
  }
  return "auto";
}

inline size_t count_non_finite(const std::vector<float>& values) {
  return std::count_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
}

// One prefill kernel on `s`: output and row log-sum-exp against prefill_attention. The split-KV
// path runs with its automatic splits and with splits of 64 and 100 keys (many partials to merge,
// splits on and off the 64-key tiles) and, over a short prefix, of 7 keys (splits past the first
// query's last key: rows that see none of a split's keys, whose partial has max -inf), its
// workspace filled with NaN each time: a merge that folds in a partial no kernel wrote this call
// shows as a non-finite output (max_abs_diff passes NaN by).
inline void check_prefill_attention(const PrefillShape& s, cuda::PrefillKernel kernel) {
  if (kernel == cuda::PrefillKernel::kWgmma && !cuda::wgmma_prefill_available(s.head_dim))
    GTEST_SKIP() << "the wgmma prefill needs an sm_90 GPU";
  const int keys = s.prefix + s.n_queries, d = s.head_dim;
  const int q_width = s.n_query_heads * d;
  const auto q = random_bf16_values(size_t(s.n_queries) * q_width, 1);
  const auto k = random_bf16_values(size_t(s.n_kv_heads) * keys * d, 2);
  const auto v = random_bf16_values(size_t(s.n_kv_heads) * keys * d, 3);

  kernels::PrefillAttentionArgs cpu;
  cpu.n_query_heads = s.n_query_heads;
  cpu.n_kv_heads = s.n_kv_heads;
  cpu.head_dim = d;
  cpu.n_queries = s.n_queries;
  cpu.queries = q.data();
  for (int h = 0; h < s.n_kv_heads; ++h) {
    cpu.keys.push_back(k.data() + size_t(h) * keys * d);
    cpu.values.push_back(v.data() + size_t(h) * keys * d);
    cpu.prefix.push_back(s.prefix);
  }
  std::vector<float> expected(size_t(s.n_queries) * q_width);
  std::vector<float> expected_lse(size_t(s.n_query_heads) * s.n_queries);
  cpu.output = expected.data();
  cpu.row_log_sum_exp = expected_lse.data();
  kernels::prefill_attention(cpu);

  const int q_stride = q_width + s.q_row_padding;
  std::vector<float> q_rows(size_t(s.n_queries) * q_stride, 0.f);
  for (int i = 0; i < s.n_queries; ++i)
    std::copy_n(q.begin() + size_t(i) * q_width, q_width, q_rows.begin() + size_t(i) * q_stride);
  auto d_q = to_device_bf16(q_rows), d_k = to_device_bf16(k), d_v = to_device_bf16(v);
  cuda::DeviceBuffer d_out(expected.size() * 2), d_lse(expected_lse.size() * 4);
  cuda::PrefillAttentionArgs gpu{.q = d_q.as<__nv_bfloat16>(),
                                 .q_row_stride = q_stride,
                                 .k = d_k.as<__nv_bfloat16>(),
                                 .v = d_v.as<__nv_bfloat16>(),
                                 .kv_head_stride = int64_t(keys) * d,
                                 .out = d_out.as<__nv_bfloat16>(),
                                 .out_row_stride = q_width,
                                 .lse = d_lse.as<float>(),
                                 .n_queries = s.n_queries,
                                 .query_offset = s.prefix,
                                 .n_query_heads = s.n_query_heads,
                                 .n_kv_heads = s.n_kv_heads,
                                 .head_dim = d,
                                 .scale = 1.0f / std::sqrt(float(d)),
                                 .kernel = kernel};
  const bool split_kv = kernel == cuda::PrefillKernel::kSplitKv;
  std::vector<int> chunks{0};
  if (split_kv)
    chunks = keys <= 256 ? std::vector<int>{0, 64, 100, 7} : std::vector<int>{0, 64, 100};
  for (int chunk_keys : chunks) {
    gpu.split_kv_chunk_keys = chunk_keys;
    cuda::DeviceBuffer workspace;
    if (split_kv) {
      workspace = cuda::DeviceBuffer(cuda::prefill_split_kv_workspace_bytes(gpu));
      cuda::check(cudaMemset(workspace.data(), 0xff, workspace.bytes()), "memset");
      gpu.workspace = workspace.data();
    }
    cuda::check(cudaMemset(d_out.data(), 0xff, d_out.bytes()), "memset");
    cuda::check(cudaMemset(d_lse.data(), 0xff, d_lse.bytes()), "memset");
    cuda::prefill_attention(gpu, nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    const auto out = from_device_bf16(d_out, expected.size());
    const auto lse = from_device<float>(d_lse, expected_lse.size());
    EXPECT_EQ(count_non_finite(out) + count_non_finite(lse), 0u) << "split " << chunk_keys;
    EXPECT_LT(max_abs_diff(out, expected), 2e-2) << "split " << chunk_keys;
    EXPECT_LT(max_abs_diff(lse, expected_lse), 2e-3) << "split " << chunk_keys;
  }
}

enum class Lists { kNone, kPerHead, kSharedByGroup };

struct DecodeShape {
  int head_dim, n_query_heads, n_kv_heads;
  std::vector<int> lengths;  // per sequence (every head of a sequence gets length + h)
  Lists lists;
};

// Ragged heads with gaps between them (as after compaction with spare room); index lists of about
// a third of each head's entries, the newest always in.
inline void check_decode_attention(const DecodeShape& s) {
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
      rows += length[b * hkv + h] + 3;
      max_length = std::max(max_length, length[b * hkv + h]);
    }
  const auto k = random_bf16_values(rows * d, 11, 2.0f);
  const auto v = random_bf16_values(rows * d, 12);
  const auto q = random_bf16_values(size_t(batch) * hq * d, 13, 2.0f);

  std::vector<int32_t> indices;
  std::vector<float> bias;
  std::vector<int64_t> index_offset(batch * hq);
  std::vector<int32_t> index_count(batch * hq);
  std::mt19937 rng(5);
  const bool indexed = s.lists != Lists::kNone, shared = s.lists == Lists::kSharedByGroup;
  for (int b = 0; indexed && b < batch; ++b)
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

  auto d_q = to_device_bf16(q), d_k = to_device_bf16(k), d_v = to_device_bf16(v);
  auto d_offset = to_device(offset), d_length = to_device(length);
  auto d_indices = to_device(indices.empty() ? std::vector<int32_t>{0} : indices);
  auto d_bias = to_device(bias.empty() ? std::vector<float>{0} : bias);
  auto d_index_offset = to_device(index_offset);
  auto d_index_count = to_device(index_count);
  cuda::DeviceBuffer d_out(expected.size() * 2);
  cuda::DeviceBuffer workspace(cuda::decode_attention_workspace_floats(batch, hq, d, max_length) *
                               4);
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
    gpu.shared_group_lists = shared;
    if (!shared) gpu.logit_bias = d_bias.as<float>();
  }
  gpu.out = d_out.as<__nv_bfloat16>();
  gpu.out_seq_stride = int64_t(hq) * d;
  gpu.batch = batch;
  gpu.n_query_heads = hq;
  gpu.n_kv_heads = hkv;
  gpu.head_dim = d;
  gpu.scale = 1.0f / std::sqrt(float(d));
  gpu.workspace = workspace.as<float>();
  // The automatic split, 64-key chunks (many partials to merge), and the split by the rows' own
  // lengths (dense only; ragged batches give it more chunks than the automatic one).
  const int by_lengths = cuda::dense_decode_chunk(gpu, length.data(), batch * hkv);
  for (int chunk : {0, 64, by_lengths}) {
    gpu.chunk_size = chunk;
    cuda::check(cudaMemset(d_out.data(), 0xff, d_out.bytes()), "memset");
    // NaN in every partial slot: a merge that folds in a split no kernel wrote this call shows it.
    cuda::check(cudaMemset(workspace.data(), 0xff, workspace.bytes()), "memset");
    cuda::decode_attention(gpu, nullptr);
    cuda::check(cudaDeviceSynchronize(), "sync");
    EXPECT_LT(max_abs_diff(from_device_bf16(d_out, expected.size()), expected), 1e-2)
        << "chunk " << chunk;
  }
}

struct ChunkShape {
  int head_dim, n_query_heads, n_kv_heads, n_queries, query_offset;
};

// Queries in rows of a fused QKV projection, keys with spare rows per head, sums with spare columns
// (every stride differs from the data's width); both twins fed the same LSE, computed in double.
inline void check_attention_column_sums(const ChunkShape& s) {
  const int d = s.head_dim, hq = s.n_query_heads, group = hq / s.n_kv_heads;
  const int n_keys = s.query_offset + s.n_queries;
  const int64_t q_stride = int64_t(hq + 2 * s.n_kv_heads) * d, kv_stride = int64_t(n_keys + 8) * d;
  const int64_t sums_stride = n_keys + 3;
  const auto q = random_bf16_values(size_t(s.n_queries) * q_stride, 31 + s.n_queries, 3.0f);
  const auto k = random_bf16_values(size_t(s.n_kv_heads) * kv_stride, 32 + n_keys, 1.0f);
  std::vector<float> lse(size_t(hq) * s.n_queries);
  std::vector<double> p;
  for (int a = 0; a < hq; ++a)
    for (int i = 0; i < s.n_queries; ++i)
      lse[size_t(a) * s.n_queries + i] =
          float(softmax_row(q.data() + i * q_stride + a * d, k.data() + (a / group) * kv_stride,
                            s.query_offset + i + 1, d, 1.0 / std::sqrt(double(d)), p));
  std::vector<float> expected(size_t(hq) * sums_stride, 0.25f);  // the sums add into this
  kernels::attention_column_sums({.q = q.data(),
                                  .q_row_stride = q_stride,
                                  .k = k.data(),
                                  .kv_head_stride = kv_stride,
                                  .lse = lse.data(),
                                  .column_sums = expected.data(),
                                  .sums_head_stride = sums_stride,
                                  .n_queries = s.n_queries,
                                  .query_offset = s.query_offset,
                                  .n_query_heads = hq,
                                  .n_kv_heads = s.n_kv_heads,
                                  .head_dim = d});
  auto d_q = to_device_bf16(q), d_k = to_device_bf16(k);
  auto d_lse = to_device(lse);
  auto d_sums = to_device(std::vector<float>(expected.size(), 0.25f));
  cuda::attention_column_sums({.q = d_q.as<__nv_bfloat16>(),
                               .q_row_stride = q_stride,
                               .k = d_k.as<__nv_bfloat16>(),
                               .kv_head_stride = kv_stride,
                               .lse = d_lse.as<float>(),
                               .column_sums = d_sums.as<float>(),
                               .sums_head_stride = sums_stride,
                               .n_queries = s.n_queries,
                               .query_offset = s.query_offset,
                               .n_query_heads = hq,
                               .n_kv_heads = s.n_kv_heads,
                               .head_dim = d},
                              nullptr);
  const auto got = from_device<float>(d_sums, expected.size());
  for (size_t x = 0; x < got.size(); ++x)  // columns past the keys stay 0.25
    ASSERT_NEAR(got[x], expected[x], 1e-3 * std::abs(expected[x]) + 1e-5)
        << "head " << x / sums_stride << " key " << x % sums_stride;
}

struct WindowSumsShape {
  int head_dim, n_query_heads, n_kv_heads, length, window;
  bool casts;
};

// Multiples of 1/8 in [-2, 2]: bf16 values whose every q·k (head_dim <= 256) is exact in fp32, in
// the device's FMA chain as in the CPU's products and sums.
inline std::vector<float> random_eighths(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> eighths(-16, 16);
  std::vector<float> values(n);
  for (float& x : values) x = eighths(rng) / 8.0f;
  return values;
}

// The window rows as the engine copies them ([w, Hq*d]) but with spare elements after each row,
// keys with spare rows per head, sums with spare columns (left alone). With the casts the inputs'
// q·k are exact (random_eighths), so both twins round the same logits; what differs is expf (an
// ulp or two) and the order the row's normaliser is summed in, which can move a p across a bf16
// rounding boundary: one bf16 step, at most 2^-7 of that term, so at most 1/128 of the sum. In
// fp32, bf16 values of any size and the f32 differences of the sums: 1e-4 relative.
inline void check_window_attention_sums(const WindowSumsShape& s) {
  const int d = s.head_dim, hq = s.n_query_heads, L = s.length, w = s.window;
  const int64_t row_stride = int64_t(hq) * d + 8, kv_stride = int64_t(L + 5) * d;
  const int64_t sums_stride = L + 3;
  const size_t n_queries = size_t(w) * row_stride, n_keys = size_t(s.n_kv_heads) * kv_stride;
  const auto q = s.casts ? random_eighths(n_queries, 41 + L) : random_bf16_values(n_queries, 41, 2);
  const auto k = s.casts ? random_eighths(n_keys, 42 + w) : random_bf16_values(n_keys, 42);
  std::vector<float> expected(size_t(hq) * sums_stride, 0.25f);
  kernels::window_attention_sums({.queries = q.data(),
                                  .query_row_stride = row_stride,
                                  .query_head_stride = d,
                                  .keys = k.data(),
                                  .kv_head_stride = kv_stride,
                                  .sums = expected.data(),
                                  .sums_head_stride = sums_stride,
                                  .length = L,
                                  .window = w,
                                  .n_query_heads = hq,
                                  .n_kv_heads = s.n_kv_heads,
                                  .head_dim = d,
                                  .reference_bf16_casts = s.casts});
  auto d_q = to_device_bf16(q), d_k = to_device_bf16(k);
  auto d_sums = to_device(std::vector<float>(expected.size(), 0.25f));
  cuda::DeviceBuffer workspace(cuda::window_attention_sums_workspace_bytes(hq, L, w));
  // NaN in every workspace slot: a partial no kernel wrote this call shows.
  cuda::check(cudaMemset(workspace.data(), 0xff, workspace.bytes()), "memset");
  cuda::window_attention_sums({.queries = d_q.as<__nv_bfloat16>(),
                               .query_row_stride = row_stride,
                               .query_head_stride = d,
                               .keys = d_k.as<__nv_bfloat16>(),
                               .kv_head_stride = kv_stride,
                               .sums = d_sums.as<float>(),
                               .sums_head_stride = sums_stride,
                               .length = L,
                               .window = w,
                               .n_query_heads = hq,
                               .n_kv_heads = s.n_kv_heads,
                               .head_dim = d,
                               .reference_bf16_casts = s.casts,
                               .workspace = workspace.data()},
                              nullptr);
  const auto got = from_device<float>(d_sums, expected.size());
  const double relative = s.casts ? 1.0 / 128 : 1e-4;
  for (size_t x = 0; x < got.size(); ++x)  // columns past the keys stay 0.25
    ASSERT_NEAR(got[x], expected[x], relative * std::abs(expected[x]) + 1e-6)
        << "head " << x / sums_stride << " key " << x % sums_stride;
}

struct DropKvShape {
  int head_dim, n_query_heads, n_kv_heads, length, window;
  // The benchmark's baseline, dropkv_scores_materialised: the differences y - v in f32, the
  // twin's direct_distance form.
  bool materialised = false;
  int tiles_per_block = 0;  // 0: the launch's own choice (one wave of blocks)
};

// The window forward on the device (prefill_attention over the last W queries), then both
// scorers fed its outputs y and LSE.
inline void check_dropkv_scores(const DropKvShape& s) {
  const int d = s.head_dim, L = s.length, W = s.window, hq = s.n_query_heads, hkv = s.n_kv_heads;
  const auto q = random_bf16_values(size_t(W) * hq * d, 21, 2.0f);  // [W, Hq*d] as the engine has
  const auto k = random_bf16_values(size_t(hkv) * L * d, 22, 1.0f);
  const auto v = random_bf16_values(size_t(hkv) * L * d, 23, 1.0f);
  auto d_q = to_device_bf16(q), d_k = to_device_bf16(k), d_v = to_device_bf16(v);
  cuda::DeviceBuffer d_y(size_t(W) * hq * d * 2), d_lse(size_t(hq) * W * 4),
      d_scores(size_t(hkv) * L * 4);
  cuda::prefill_attention({.q = d_q.as<__nv_bfloat16>(),
                           .q_row_stride = int64_t(hq) * d,
                           .k = d_k.as<__nv_bfloat16>(),
                           .v = d_v.as<__nv_bfloat16>(),
                           .kv_head_stride = int64_t(L) * d,
                           .out = d_y.as<__nv_bfloat16>(),
                           .out_row_stride = int64_t(hq) * d,
                           .lse = d_lse.as<float>(),
                           .n_queries = W,
                           .query_offset = L - W,
                           .n_query_heads = hq,
                           .n_kv_heads = hkv,
                           .head_dim = d,
                           .scale = 1.0f / std::sqrt(float(d))},
                          nullptr);
  const cuda::DropKvScoreArgs args{.queries = d_q.as<__nv_bfloat16>(),
                                   .outputs = d_y.as<__nv_bfloat16>(),
                                   .row_stride = int64_t(hq) * d,
                                   .lse = d_lse.as<float>(),
                                   .keys = d_k.as<__nv_bfloat16>(),
                                   .values = d_v.as<__nv_bfloat16>(),
                                   .head_stride = int64_t(L) * d,
                                   .n_query_heads = hq,
                                   .n_kv_heads = hkv,
                                   .head_dim = d,
                                   .length = L,
                                   .window = W,
                                   .scores = d_scores.as<float>(),
                                   .tiles_per_block = s.tiles_per_block};
  if (s.materialised)
    cuda::dropkv_scores_materialised(args, nullptr);
  else
    cuda::dropkv_scores(args, nullptr);
  const auto got = from_device<float>(d_scores, size_t(hkv) * L);
  // The CPU twin on the same y and LSE, rearranged to [Hq, W, d].
  const auto y_rows = from_device_bf16(d_y, size_t(W) * hq * d);
  const auto lse = from_device<float>(d_lse, size_t(hq) * W);
  std::vector<float> q_heads(q.size()), y_heads(q.size());
  for (int t = 0; t < W; ++t)
    for (int a = 0; a < hq; ++a)
      for (int i = 0; i < d; ++i) {
        q_heads[(size_t(a) * W + t) * d + i] = q[(size_t(t) * hq + a) * d + i];
        y_heads[(size_t(a) * W + t) * d + i] = y_rows[(size_t(t) * hq + a) * d + i];
      }
  std::vector<float> expected(got.size());
  kernels::dropkv_scores({.n_query_heads = hq,
                          .n_kv_heads = hkv,
                          .head_dim = d,
                          .length = L,
                          .window = W,
                          .queries = q_heads.data(),
                          .outputs = y_heads.data(),
                          .lse = lse.data(),
                          .keys = k.data(),
                          .values = v.data(),
                          .round_p_to_bf16 = true,
                          .scores = expected.data(),
                          .direct_distance = s.materialised});
  // Relative error, with a floor at 1e-3 of the largest expected score (not an absolute 1e-3: at
  // 20,011 keys every score is ~1e-6, under which a kernel writing zeros passed).
  double scale = 0;
  for (const float x : expected) scale = std::max(scale, double(std::abs(x)));
  ASSERT_GT(scale, 0.0) << "the shape's scores are all 0: nothing to compare";
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(
        worst, std::abs(double(got[i]) - expected[i]) / (std::abs(expected[i]) + 1e-3 * scale));
  EXPECT_LT(worst, 3e-2);
}

struct WalkShape {
  int head_dim, n_query_heads, n_kv_heads, length;
  bool stops;  // a profile cache whose walks stop after block 3, else random keys never stopping
};

// Dense walks of one sequence against the CPU walk: the blocks visited exactly, the output within
// bf16 rounding. Random keys run with zero thresholds (strict comparisons: no stop), so that no
// reading near a threshold can fall on different sides on the two twins; the profile's stops have
// wide margins (early_exit_check.h).
inline void check_early_exit_decode(const WalkShape& s) {
  cuda::EarlyExitDecodeOptions options;
  if (!s.stops) options.tau = options.phi = 0.f;
  const Inputs in = s.stops ? make_profile(s.head_dim, s.n_query_heads, s.n_kv_heads, s.length,
                                           {GroupProfile{}}, 7)
                            : make_random(s.head_dim, s.n_query_heads, s.n_kv_heads, s.length, 21);
  const std::vector<Walk> walks = expected_dense({in}, options);
  expect_matches(walks, run_gpu({in}, options, {}), s.n_query_heads / s.n_kv_heads, s.head_dim);
}

inline std::vector<OpCase> attention_cases() {
  std::vector<OpCase> cases;
  auto add_prefill = [&](cuda::PrefillKernel kernel, std::initializer_list<PrefillShape> shapes) {
    for (const PrefillShape& s : shapes)
      cases.push_back({case_name("prefill_attention_", prefill_kernel_name(kernel), "_d",
                                 s.head_dim, "_hq", s.n_query_heads, "_hkv", s.n_kv_heads, "_n",
                                 s.n_queries, "_prefix", s.prefix, "_pad", s.q_row_padding),
                       [=] { check_prefill_attention(s, kernel); }});
  };
  // The mma.sync kernel (every GPU; the only one for head_dim 64): lengths off the 64-row tiles,
  // GQA groups 1 / 3 / 4 / 7, prefixes, a padded query row.
  add_prefill(cuda::PrefillKernel::kMmaSync, {{64, 9, 3, 1, 0},
                                              {64, 9, 3, 37, 0},
                                              {64, 4, 4, 130, 0},
                                              {128, 8, 2, 200, 0},
                                              {128, 32, 8, 65, 100},
                                              {128, 4, 1, 300, 1},
                                              {64, 6, 2, 64, 64},
                                              {64, 14, 2, 77, 200},
                                              {128, 28, 4, 129, 0},
                                              {128, 8, 2, 200, 60, 8}});
  // The Hopper wgmma kernel (128-row query tiles, 128-key tiles): lengths and prefixes on and off
  // the tile grid, one query, several query tiles after a long prefix.
  add_prefill(cuda::PrefillKernel::kWgmma, {{128, 8, 2, 1, 0},
                                            {128, 8, 2, 128, 0},
                                            {128, 8, 2, 200, 0},
                                            {128, 4, 4, 257, 0},
                                            {128, 32, 8, 65, 100},
                                            {128, 4, 1, 300, 1},
                                            {128, 9, 3, 383, 517},
                                            {128, 8, 2, 640, 1400},
                                            {128, 4, 1, 1, 700},
                                            {128, 28, 4, 200, 0}});
  // The split-KV path (each KV head's window x group rows over its keys once): DropKV's window (8
  // queries after a long prefix) on Llama-3.1-8B's heads, W = 1, 8, 9 and 16 with GQA groups 1, 3,
  // 4, 7, 8 and 16, so 1 to 256 rows a KV head (one pass of 1, 2 or 4 row tiles; 2 passes of 64 and
  // of 36; 4 passes), prefixes just past the 1,024 where kAuto takes the path and of 20,000, key
  // counts off the 64-key tiles, a prefix under one split, a padded query row. Over prefixes of
  // thousands of keys the rows are near-uniform averages of values in [-1, 1]: |out| stays below
  // 0.04 (0.017 at 20,000 keys, under the 2e-2 tolerance) and a causal mask a few keys off moves
  // the log-sum-exp by ~keys / prefix (< 2e-3), so only short prefixes check the mask and the
  // output: one for each row layout (1, 2 and 4 row tiles; 2 and 4 passes), GQA groups above 1.
  add_prefill(cuda::PrefillKernel::kSplitKv, {{128, 32, 8, 8, 5000},
                                              {128, 8, 2, 1, 3000},
                                              {64, 9, 3, 16, 2100},
                                              {128, 4, 4, 3, 70},
                                              {64, 14, 2, 8, 1500},
                                              {128, 8, 8, 1, 1030},
                                              {128, 16, 16, 16, 1100},
                                              {64, 32, 8, 8, 20000, 8},
                                              {64, 16, 2, 16, 1025},
                                              {128, 32, 4, 16, 20000},
                                              {128, 16, 2, 9, 3001},
                                              {64, 16, 1, 16, 1500},
                                              {128, 8, 2, 1, 50},
                                              {128, 32, 8, 8, 70},
                                              {64, 14, 2, 8, 90},
                                              {128, 16, 2, 9, 75},
                                              {64, 16, 1, 16, 100}});

  const char* list_names[] = {"dense", "lists", "shared_lists"};
  // 400 rows of short heads: more blocks than are resident at once (the many-waves kernel).
  for (const DecodeShape& s : {DecodeShape{64, 9, 3, {1, 300, 1000}, Lists::kNone},
                               DecodeShape{128, 32, 8, {4096}, Lists::kNone},
                               DecodeShape{128, 8, 2, {1, 257, 5000}, Lists::kNone},
                               DecodeShape{128, 4, 4, {700}, Lists::kNone},
                               DecodeShape{128, 32, 8, {0, 130, 20000}, Lists::kNone},
                               DecodeShape{64, 14, 2, {3000, 65}, Lists::kNone},
                               DecodeShape{128, 28, 4, {2049}, Lists::kNone},
                               DecodeShape{128, 8, 2, std::vector<int>(200, 150), Lists::kNone},
                               DecodeShape{64, 9, 3, {1, 300, 1000}, Lists::kPerHead},
                               DecodeShape{128, 32, 8, {2000, 5}, Lists::kPerHead},
                               DecodeShape{64, 9, 3, {1, 300, 1000}, Lists::kSharedByGroup},
                               DecodeShape{128, 32, 8, {6000, 5}, Lists::kSharedByGroup}})
    cases.push_back(
        {case_name("decode_attention_", list_names[int(s.lists)], "_d", s.head_dim, "_hq",
                   s.n_query_heads, "_hkv", s.n_kv_heads, "_batch", s.lengths.size(), "_max",
                   *std::max_element(s.lengths.begin(), s.lengths.end())),
         [=] { check_decode_attention(s); }});

  // GQA groups 1, 4 and 7; one query; lengths on and off multiples of 64; chunks after a prefix;
  // head_dim 256.
  for (const ChunkShape& s : {ChunkShape{64, 4, 4, 1, 0}, ChunkShape{64, 8, 2, 130, 0},
                              ChunkShape{128, 7, 1, 300, 0}, ChunkShape{128, 14, 2, 77, 200},
                              ChunkShape{64, 28, 4, 300, 37}, ChunkShape{128, 8, 2, 1, 511},
                              ChunkShape{128, 4, 1, 64, 64}, ChunkShape{128, 32, 8, 257, 0},
                              ChunkShape{256, 4, 2, 100, 30}, ChunkShape{64, 9, 3, 200, 0}})
    cases.push_back({case_name("attention_column_sums_d", s.head_dim, "_hq", s.n_query_heads,
                               "_hkv", s.n_kv_heads, "_n", s.n_queries, "_offset", s.query_offset),
                     [=] { check_attention_column_sums(s); }});

  // Qwen2.5-Coder-0.5B's and Llama-3.1-8B's heads, SnapKV's window and DropKV's, lengths off the
  // 64-key chunks and 32-key slices, a window longer than the prompt, head_dim 256.
  for (bool casts : {true, false})
    for (const WindowSumsShape& s :
         {WindowSumsShape{64, 14, 2, 1000, 32, casts}, WindowSumsShape{64, 14, 2, 777, 8, casts},
          WindowSumsShape{128, 32, 8, 300, 32, casts}, WindowSumsShape{128, 32, 8, 65, 8, casts},
          WindowSumsShape{64, 9, 3, 20, 32, casts}, WindowSumsShape{256, 4, 2, 130, 16, casts}})
      cases.push_back({case_name("window_attention_sums_", casts ? "casts" : "fp32", "_d",
                                 s.head_dim, "_hq", s.n_query_heads, "_hkv", s.n_kv_heads,
                                 "_length", s.length, "_window", s.window),
                       [=] { check_window_attention_sums(s); }});

  // Groups 1, 3, 4, 7 and 8 on both head sizes, so every instance of the scorer runs: window rows
  // (group × W) in 1, 2, 3 and 4 row blocks of one pass, two passes (rows 65-128) and two row
  // sets (192 rows). Lengths of 2 keys (1 key is degenerate: p = 1, so ω² = 1e12 times a distance
  // ‖y‖² + ‖v‖² − 2⟨y,v⟩ of 0 ± rounding, y being that key's v), one tile, off the 64-key tiles and
  // long (20,011); the long one also with one tile per block and with one block walking each
  // head's 313 tiles. At up to ~2,000 keys the launch's own choice is one tile per block, so the
  // ring's steady state (ranges of several tiles, the K/V stages reused, the s_part buffers
  // alternating, the row sets re-priming the ring) is forced on each instance at both head sizes
  // with short ranges (3 to 5 tiles, the last one shorter) and one block walking a whole head.
  for (const DropKvShape& s : {DropKvShape{128, 32, 8, 300, 8},
                               DropKvShape{64, 9, 3, 1000, 8},
                               DropKvShape{128, 8, 2, 130, 32},
                               DropKvShape{128, 4, 4, 64, 8},
                               DropKvShape{64, 14, 2, 777, 8},
                               DropKvShape{128, 32, 8, 2, 1},
                               DropKvShape{64, 4, 4, 97, 16},
                               DropKvShape{64, 9, 3, 515, 16},
                               DropKvShape{128, 32, 4, 1000, 8},
                               DropKvShape{128, 32, 4, 2001, 16},
                               DropKvShape{64, 16, 2, 777, 16},
                               DropKvShape{64, 16, 2, 300, 24},
                               DropKvShape{128, 32, 8, 20011, 8},
                               DropKvShape{128, 32, 8, 20011, 8, false, 1},
                               DropKvShape{128, 32, 8, 20011, 8, false, 1000},
                               DropKvShape{64, 16, 2, 5000, 16, false, 1},
                               DropKvShape{64, 16, 2, 5000, 16, false, 1000},
                               DropKvShape{128, 32, 8, 1000, 8, false, 3},
                               DropKvShape{64, 9, 3, 1000, 8, false, 4},
                               DropKvShape{128, 8, 2, 700, 12, false, 5},
                               DropKvShape{64, 4, 4, 500, 16, false, 1000},
                               DropKvShape{64, 16, 2, 777, 16, false, 5},
                               DropKvShape{128, 32, 4, 900, 16, false, 4},
                               DropKvShape{64, 16, 2, 700, 24, false, 3},
                               DropKvShape{128, 16, 2, 600, 24, false, 1000}})
    cases.push_back({case_name("dropkv_scores_d", s.head_dim, "_hq", s.n_query_heads, "_hkv",
                               s.n_kv_heads, "_length", s.length, "_window", s.window,
                               s.tiles_per_block ? "_tiles_per_block" : "",
                               s.tiles_per_block ? std::to_string(s.tiles_per_block) : ""),
                     [=] { check_dropkv_scores(s); }});
  // The materialising baseline on shapes whose [rows, L, d] differences stay small.
  for (const DropKvShape& s :
       {DropKvShape{128, 8, 2, 130, 32, true}, DropKvShape{64, 9, 3, 1000, 8, true},
        DropKvShape{64, 14, 2, 777, 8, true}})
    cases.push_back({case_name("dropkv_scores_materialised_d", s.head_dim, "_hq", s.n_query_heads,
                               "_hkv", s.n_kv_heads, "_length", s.length, "_window", s.window),
                     [=] { check_dropkv_scores(s); }});

  // Walks of 1 to 80 blocks (a cache within the sinks, one block, many), GQA groups 1 / 3 / 4 / 7.
  for (const WalkShape& s : {WalkShape{128, 32, 8, 3001, false}, WalkShape{64, 9, 3, 130, false},
                             WalkShape{128, 4, 4, 3, false}, WalkShape{64, 14, 2, 4100, false},
                             WalkShape{128, 28, 4, 700, false}, WalkShape{128, 32, 8, 5000, true},
                             WalkShape{64, 14, 2, 5000, true}})
    cases.push_back({case_name("early_exit_decode_d", s.head_dim, "_hq", s.n_query_heads, "_hkv",
                               s.n_kv_heads, "_n", s.length, s.stops ? "_stops" : "_full"),
                     [=] { check_early_exit_decode(s); }});
  return cases;
}

}  // namespace kvb::test
