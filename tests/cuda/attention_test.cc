// The CUDA attention kernels (kernels/cuda/attention.h) beyond their CPU twins: the prefill's
// refusals, its two kernels against each other on a long prefill, and the decode step's in-kernel
// append against the separate one. Against the CPU twins (kernels/cpu/attention.h) over many
// shapes: tests/cuda/backend_ops_test.cc.
#include "kernels/cuda/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/append_check.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

using test::random_bf16_values;

// Refused before any CUDA call (runs without a GPU too).
TEST(FlashPrefill, SplitKvNeedsAWorkspace) {
  cuda::PrefillAttentionArgs a;
  a.n_queries = 8;
  a.head_dim = 128;
  a.n_query_heads = a.n_kv_heads = 1;
  a.kernel = cuda::PrefillKernel::kSplitKv;
  EXPECT_THROW(cuda::prefill_attention(a, nullptr), std::invalid_argument);
}

// Beyond the split-KV path's reach (16 queries, GQA groups of 16, head_dim 64 or 128) it refuses
// before any CUDA call, its workspace size too (runs without a GPU).
TEST(FlashPrefill, SplitKvRefusesBeyondItsReach) {
  cuda::PrefillAttentionArgs a;
  a.n_queries = 8;
  a.head_dim = 128;
  a.n_query_heads = 32;
  a.n_kv_heads = 8;
  a.kernel = cuda::PrefillKernel::kSplitKv;
  int workspace = 0;
  a.workspace = &workspace;
  for (const auto change : {+[](cuda::PrefillAttentionArgs& x) { x.n_queries = 17; },
                            +[](cuda::PrefillAttentionArgs& x) { x.n_query_heads = 17 * 8; },
                            +[](cuda::PrefillAttentionArgs& x) { x.n_query_heads = 30; },
                            +[](cuda::PrefillAttentionArgs& x) { x.head_dim = 96; }}) {
    cuda::PrefillAttentionArgs beyond = a;
    change(beyond);
    EXPECT_THROW(cuda::prefill_attention(beyond, nullptr), std::invalid_argument);
    EXPECT_THROW(cuda::prefill_split_kv_workspace_bytes(beyond), std::invalid_argument);
  }
}

// Both kernels move rows in 16-byte pieces: a query stride off that grid is refused before any
// launch (a misaligned-address fault would poison the context); runs without a GPU too. A padded
// stride on the grid: the backend-ops row prefill_attention_mma_..._pad8.
TEST(FlashPrefill, RefusesRowsOffThe16ByteGrid) {
  cuda::PrefillAttentionArgs a;
  a.n_queries = 200;
  a.query_offset = 60;
  a.n_query_heads = 8;
  a.n_kv_heads = 2;
  a.head_dim = 128;
  a.q_row_stride = 8 * 128 + 4;
  a.kv_head_stride = 260 * 128;
  for (const auto kernel : {cuda::PrefillKernel::kAuto, cuda::PrefillKernel::kMmaSync}) {
    a.kernel = kernel;
    EXPECT_THROW(cuda::prefill_attention(a, nullptr), std::invalid_argument);
  }
}

// cuda::dense_decode_chunk: rows of one length get the automatic split (the same chunk count);
// ragged rows (a few long, many short: cells of several budgets) get a shorter chunk whose busy
// blocks still fit the places the uniform split shows the GPU holds, and the next shorter one
// would not; index lists keep the automatic split.
TEST(DecodeSplit, RaggedRowsSplitTheirLongRowsFurtherWithinOneWave) {
  KVB_REQUIRE_GPU();
  cuda::DecodeAttentionArgs a{.max_kv_length = 14000,
                              .batch = 10,
                              .n_query_heads = 32,
                              .n_kv_heads = 8,
                              .head_dim = 128,
                              .append = {}};
  const int rows = a.batch * a.n_kv_heads;
  const std::vector<int32_t> uniform(rows, 14000);
  std::vector<int32_t> ragged(rows, 1400);
  for (int r = 0; r < rows; r += 10) ragged[r] = 14000;
  auto busy = [&](const std::vector<int32_t>& lengths, int chunk) {
    int64_t blocks = 0;
    for (int32_t n : lengths) blocks += (n + chunk - 1) / chunk;
    return blocks;
  };
  const int by_uniform = cuda::dense_decode_chunk(a, uniform.data(), rows);
  const int by_ragged = cuda::dense_decode_chunk(a, ragged.data(), rows);
  ASSERT_GT(by_uniform, 64);
  EXPECT_EQ(by_uniform % 64, 0);
  EXPECT_EQ(by_ragged % 64, 0);
  const size_t automatic_chunks =
      cuda::decode_attention_layout_workspace_floats(a) / (size_t(a.batch) * 32 * (128 + 2));
  EXPECT_EQ(size_t((14000 + by_uniform - 1) / by_uniform), automatic_chunks);
  // The places: at least the uniform split's busy blocks, fewer than the next shorter chunk's.
  const int64_t places_at_least = busy(uniform, by_uniform);
  const int64_t places_below = busy(uniform, by_uniform - 64);
  EXPECT_LT(by_ragged, by_uniform / 2);
  EXPECT_LT(busy(ragged, by_ragged), places_below);
  EXPECT_GT(busy(ragged, by_ragged - 64), places_at_least);
  std::vector<int32_t> indices{0};
  a.indices = indices.data();  // host pointer: only its presence matters here
  EXPECT_EQ(cuda::dense_decode_chunk(a, ragged.data(), rows), 0);
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
    cuda::prefill_attention(a, nullptr);
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
  const test::AppendedRun got =
      test::expect_same_appends(fused, separate, lengths.size(), cache_values.size(), outputs);
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
