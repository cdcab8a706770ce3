// The exact q.k scores on the GPU (kernels/cuda/query_key_scores.h) against the CPU twin
// (kernels/cpu/query_key_scores.h): bit-equal below each slot's length (the same fused sums in
// dimension order over the same bf16 values), -inf from there to the width; batch of two with
// different lengths, GQA groups of 1, 4 and 8, head_dim 64 and 128.
#include "kernels/cpu/query_key_scores.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cuda/query_key_scores.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

void check_scores(int hq, int hkv, int d) {
  const int batch = 2, capacity = 300, width = 320;
  const std::vector<int32_t> lengths_per_sequence = {300, 173};
  const std::vector<float> q = test::random_bf16_values(size_t(batch) * hq * d, 5);
  const std::vector<float> keys =
      test::random_bf16_values(size_t(batch) * hkv * capacity * d, 6, 2.0f);
  std::vector<int32_t> lengths;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) lengths.push_back(lengths_per_sequence[b]);
  auto d_q = test::to_device_bf16(q);
  auto d_keys = test::to_device_bf16(keys);
  auto d_lengths = test::to_device(lengths);
  const int lists = batch * hq;
  cuda::DeviceBuffer d_scores(size_t(lists) * width * 4);
  cuda::QueryKeyScoresArgs args;
  args.q = d_q.as<__nv_bfloat16>();
  args.q_seq_stride = int64_t(hq) * d;
  args.keys = d_keys.as<__nv_bfloat16>();
  args.key_slot_stride = int64_t(capacity) * d;
  args.batch = batch;
  args.n_query_heads = hq;
  args.n_kv_heads = hkv;
  args.head_dim = d;
  args.lengths = d_lengths.as<int32_t>();
  args.width = width;
  args.scores = d_scores.as<float>();
  args.score_stride = width;
  cuda::query_key_scores(args, nullptr);
  std::vector<float> got(size_t(lists) * width);
  d_scores.download(got.data(), got.size() * 4);

  const int group = hq / hkv;
  std::vector<float> want(capacity);
  for (int b = 0; b < batch; ++b)
    for (int a = 0; a < hq; ++a) {
      const int slot = b * hkv + a / group;
      const int length = lengths[slot];
      kernels::query_key_scores(q.data() + (int64_t(b) * hq + a) * d,
                                keys.data() + int64_t(slot) * capacity * d, length, d, want.data());
      const float* row = got.data() + (int64_t(b) * hq + a) * width;
      for (int j = 0; j < length; ++j)
        ASSERT_EQ(row[j], want[j]) << "sequence " << b << " head " << a << " key " << j;
      for (int j = length; j < width; ++j)
        ASSERT_TRUE(std::isinf(row[j]) && row[j] < 0) << "sequence " << b << " key " << j;
    }
}

TEST(QueryKeyScores, MatchesCpuTwin) {
  KVB_REQUIRE_GPU();
  check_scores(8, 8, 64);
  check_scores(8, 2, 128);
  check_scores(16, 2, 64);
}

}  // namespace
}  // namespace kvb
