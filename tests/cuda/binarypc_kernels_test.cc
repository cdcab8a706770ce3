// BinaryPC's GPU kernels (kernels/cuda/binary_hash.h) and the shared GPU top-k
// (kernels/cuda/topk_select.h) against their CPU twins: codes bit-exact with binary_hash_keys
// (prefill range and tokens hashed as they arrive), quantised query planes equal to
// quantize_query_group, scores equal to binary_hash_group_scores, selections equal to the CPU
// BinaryPcSelector's (EAS on/off, budget below and above the prompt, decode tokens forced), and the
// sparse decode_attention over them within bf16 tolerance of the CPU attention. Inputs are
// bf16-representable so both sides see the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/kv_store.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/binary_hash.h"
#include "kernels/cpu/topk_select.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/topk_select.h"
#include "policies/binarypc_projection.h"
#include "policies/decode_selectors.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/sparse_attention_check.h"

namespace kvb {
namespace {

using kernels::kBinaryHashBits;
using kernels::QuantizedQuery;
using test::random_bf16_values;

// Keys [slots, length, d] with a few exactly-zero keys (every product 0: sign(0) handling).
std::vector<float> test_keys(int slots, int length, int d, uint32_t seed) {
  std::vector<float> keys = random_bf16_values(size_t(slots) * length * d, seed, 2.0f);
  for (int s = 0; s < slots; ++s)
    for (int j : {0, length / 2})
      std::fill_n(keys.begin() + (int64_t(s) * length + j) * d, d, 0.0f);
  return keys;
}

// A projection per slot fitted to the slot's keys with Algorithm 1 (realistic residual decay).
std::vector<float> fitted_projections(const std::vector<float>& keys, int slots, int length,
                                      int d) {
  std::vector<float> projection(size_t(slots) * kBinaryHashBits * d);
  for (int s = 0; s < slots; ++s) {
    BinaryProjectionFit fit;
    fit.seed = 17 + s;
    fit_binary_projection(keys.data() + int64_t(s) * length * d, length, d, fit,
                          projection.data() + int64_t(s) * kBinaryHashBits * d);
  }
  return projection;
}

struct HashShape {
  int slots, length, head_dim;
};
class BinaryHashKeysTest : public ::testing::TestWithParam<HashShape> {};

TEST_P(BinaryHashKeysTest, CodesBitExactAndErrorsMatchCpu) {
  KVB_REQUIRE_GPU();
  const auto [slots, length, d] = GetParam();
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

  auto d_keys = test::to_device_bf16(keys);
  auto d_projection = test::to_device(projection);
  cuda::DeviceBuffer d_codes(expected.size() * 8), d_error(expected.size() * 4);
  cuda::BinaryHashKeysArgs args;
  args.projection = d_projection.as<float>();
  args.keys = d_keys.as<__nv_bfloat16>();
  args.key_slot_stride = int64_t(length) * d;
  args.n_slots = slots;
  args.head_dim = d;
  args.codes = d_codes.as<uint64_t>();
  args.code_slot_stride = length;
  args.reconstruction_error = d_error.as<float>();
  // The prefill range, then the last tokens one at a time as decode tokens would arrive.
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
  std::vector<uint64_t> codes(expected.size());
  std::vector<float> errors(expected.size());
  d_codes.download(codes.data(), codes.size() * 8);
  d_error.download(errors.data(), errors.size() * 4);
  int mismatches = 0;
  for (size_t n = 0; n < codes.size(); ++n) mismatches += codes[n] != expected[n];
  EXPECT_EQ(mismatches, 0) << "of " << codes.size() << " codes";
  EXPECT_EQ(codes[0], 0u) << "a zero key projects to 0 everywhere: every bit is h = +1";
  for (size_t n = 0; n < errors.size(); ++n)
    ASSERT_NEAR(errors[n], expected_error[n], 1e-5f * (1.0f + expected_error[n])) << "token " << n;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BinaryHashKeysTest,
                         ::testing::Values(HashShape{2, 3001, 128}, HashShape{3, 517, 64},
                                           HashShape{1, 33, 128}));

// Runs binary_pack_queries and returns the planes [B*Hq, 8].
std::vector<uint64_t> gpu_planes(const std::vector<float>& projection, const std::vector<float>& q,
                                 int batch, int hq, int hkv, int d) {
  auto d_projection = test::to_device(projection);
  auto d_q = test::to_device_bf16(q);
  cuda::DeviceBuffer d_planes(size_t(batch) * hq * cuda::kSignCodePlanes * 8);
  cuda::BinaryPackQueriesArgs args;
  args.projection = d_projection.as<float>();
  args.q = d_q.as<__nv_bfloat16>();
  args.q_seq_stride = int64_t(hq) * d;
  args.batch = batch;
  args.n_query_heads = hq;
  args.n_kv_heads = hkv;
  args.head_dim = d;
  args.planes = d_planes.as<uint64_t>();
  cuda::binary_pack_queries(args, nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  std::vector<uint64_t> planes(size_t(batch) * hq * cuda::kSignCodePlanes);
  d_planes.download(planes.data(), planes.size() * 8);
  return planes;
}

// The CPU reference's quantised queries of every (sequence, query head).
std::vector<QuantizedQuery> cpu_quantized(const std::vector<float>& projection,
                                          const std::vector<float>& q, int batch, int hq, int hkv,
                                          int d) {
  const int group = hq / hkv;
  std::vector<QuantizedQuery> out(size_t(batch) * hq);
  std::vector<float> projected(size_t(group) * kBinaryHashBits);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      const int slot = b * hkv + h;
      kernels::binary_project_queries(projection.data() + int64_t(slot) * kBinaryHashBits * d, d,
                                      q.data() + (int64_t(b) * hq + h * group) * d, group,
                                      projected.data());
      kernels::quantize_query_group(projected.data(), group, out.data() + b * hq + h * group);
    }
  return out;
}

void expect_planes_equal(const std::vector<uint64_t>& planes,
                         const std::vector<QuantizedQuery>& expected) {
  for (size_t row = 0; row < expected.size(); ++row) {
    EXPECT_EQ(planes[row * 8], expected[row].sign_plane) << "sign plane of head " << row;
    for (int m = 0; m < kernels::kQueryMagnitudePlanes; ++m)
      EXPECT_EQ(planes[row * 8 + 1 + m], expected[row].magnitude[m])
          << "plane " << m << " of head " << row;
  }
}

TEST(BinaryPackQueries, PlanesEqualCpuQuantisation) {
  KVB_REQUIRE_GPU();
  struct Shape {
    int batch, hq, hkv, d;
  };
  for (const Shape s :
       {Shape{2, 8, 2, 128}, Shape{1, 6, 2, 64}, Shape{1, 32, 8, 128}, Shape{3, 4, 4, 64}}) {
    const int slots = s.batch * s.hkv;
    const std::vector<float> keys = test_keys(slots, 300, s.d, 5);
    const std::vector<float> projection = fitted_projections(keys, slots, 300, s.d);
    const std::vector<float> q = random_bf16_values(size_t(s.batch) * s.hq * s.d, 9, 3.0f);
    expect_planes_equal(gpu_planes(projection, q, s.batch, s.hq, s.hkv, s.d),
                        cpu_quantized(projection, q, s.batch, s.hq, s.hkv, s.d));
  }
}

// Rows e_i make p = q exactly: halves (2.5, 3.5, -2.5) must round to even, and the scale comes from
// the largest |p| of the whole group (here in the second head).
TEST(BinaryPackQueries, RoundsHalfToEvenWithOneScalePerGroup) {
  KVB_REQUIRE_GPU();
  const int d = 64, hq = 2, hkv = 1;
  std::vector<float> projection(size_t(kBinaryHashBits) * d, 0.0f);
  for (int i = 0; i < kBinaryHashBits; ++i) projection[i * d + i] = 1.0f;
  std::vector<float> q(size_t(hq) * d, 0.0f);
  q[0] = 2.5f;
  q[1] = 3.5f;
  q[2] = -2.5f;
  q[3] = 0.5f;
  q[d + 5] = -127.0f;
  const std::vector<uint64_t> planes = gpu_planes(projection, q, 1, hq, hkv, d);
  const std::vector<QuantizedQuery> expected = cpu_quantized(projection, q, 1, hq, hkv, d);
  expect_planes_equal(planes, expected);
  EXPECT_EQ(planes[0], uint64_t{1} << 2);  // only -2 is negative in head 0
  EXPECT_EQ(planes[1], 0u);                // |values| 2, 4, 2, 0 (0.5 -> 0): bit 0 nowhere...
  EXPECT_EQ(planes[2], (uint64_t{1} << 0) | (uint64_t{1} << 2));  // ...bit 1 at 2 and -2
  EXPECT_EQ(planes[3], uint64_t{1} << 1);                         // bit 2: the 4
}

// binary_score_keys over `codes` ([slots, length]) against binary_hash_group_scores of the CPU's
// quantised queries; forced: 3 sinks everywhere and tokens 7, 100 and length - 1 of slot 1 through
// the mask.
void expect_gpu_scores_equal_cpu(const std::vector<uint64_t>& codes,
                                 const std::vector<QuantizedQuery>& quantized,
                                 const std::vector<uint64_t>& planes, int batch, int hq, int hkv,
                                 int length) {
  const int slots = batch * hkv, group = hq / hkv;
  const int words = (length + 31) / 32;
  auto d_forced_list = test::to_device(std::vector<int32_t>{7, 100, length - 1});
  cuda::DeviceBuffer d_mask(size_t(slots) * words * 4);
  cuda::check(cudaMemset(d_mask.data(), 0, d_mask.bytes()), "memset");
  cuda::binary_mark_tokens(d_forced_list.as<int32_t>(), 3, 1, 3, d_mask.as<uint32_t>() + words,
                           words, nullptr);

  auto d_planes = test::to_device(planes);
  auto d_codes = test::to_device(codes);
  cuda::DeviceBuffer d_keys(size_t(slots) * length * 2);
  cuda::BinaryScoreKeysArgs args;
  args.planes = d_planes.as<uint64_t>();
  args.codes = d_codes.as<uint64_t>();
  args.code_slot_stride = length;
  args.forced_mask = d_mask.as<uint32_t>();
  args.mask_slot_stride = words;
  args.sink_tokens = 3;
  args.batch = batch;
  args.n_query_heads = hq;
  args.n_kv_heads = hkv;
  args.length = length;
  args.keys = d_keys.as<uint16_t>();
  args.key_slot_stride = length;
  cuda::binary_score_keys(args, nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  std::vector<uint16_t> got(size_t(slots) * length);
  d_keys.download(got.data(), got.size() * 2);

  std::vector<int> expected(length);
  for (int s = 0; s < slots; ++s) {
    kernels::binary_hash_group_scores(quantized.data() + s * group, group,
                                      codes.data() + int64_t(s) * length, length, expected.data());
    int mismatches = 0;
    for (int j = 0; j < length; ++j) {
      const bool forced = j < 3 || (s == 1 && (j == 7 || j == 100 || j == length - 1));
      const uint16_t want =
          forced ? cuda::kSignCodeForced : uint16_t(expected[j] + cuda::kSignCodeScoreOffset);
      mismatches += got[int64_t(s) * length + j] != want;
    }
    EXPECT_EQ(mismatches, 0) << "slot " << s << " of batch " << batch << ", Hq " << hq << ", Hkv "
                             << hkv << ", length " << length;
  }
}

// Codes hashed from keys with fitted projections (a few keys exactly zero).
void expect_scores_equal_cpu(int batch, int hq, int hkv, int d, int length, uint32_t seed) {
  const int slots = batch * hkv;
  const std::vector<float> keys = test_keys(slots, length, d, seed);
  const std::vector<float> projection = fitted_projections(keys, slots, length, d);
  std::vector<uint64_t> codes(size_t(slots) * length);
  for (int s = 0; s < slots; ++s)
    kernels::binary_hash_keys(projection.data() + int64_t(s) * kBinaryHashBits * d, d,
                              keys.data() + int64_t(s) * length * d, length,
                              codes.data() + int64_t(s) * length);
  const std::vector<float> q = random_bf16_values(size_t(batch) * hq * d, seed + 1, 2.0f);
  expect_gpu_scores_equal_cpu(codes, cpu_quantized(projection, q, batch, hq, hkv, d),
                              gpu_planes(projection, q, batch, hq, hkv, d), batch, hq, hkv, length);
}

// Groups 1..8 (each a separate instantiation; the tensor-core columns past the group must never
// win), lengths off the 16-key tiles and the 1,024-key blocks, two sequences.
TEST(BinaryScoreKeys, ScoresEqualCpuAndForcedTokensMarked) {
  KVB_REQUIRE_GPU();
  expect_scores_equal_cpu(1, 12, 3, 128, 5000, 21);
  expect_scores_equal_cpu(2, 4, 2, 64, 1037, 23);
  expect_scores_equal_cpu(1, 6, 2, 64, 130, 25);
  expect_scores_equal_cpu(1, 14, 2, 128, 2100, 27);
  expect_scores_equal_cpu(1, 16, 2, 64, 1500, 29);
  expect_scores_equal_cpu(1, 5, 5, 64, 333, 31);
}

// Long lists: more 1,024-key batches than resident blocks, so each block walks several batches with
// the next one's codes in flight (the decode step at 128K and beyond). Random codes and projection
// rows: the scores' arithmetic does not depend on where they come from.
TEST(BinaryScoreKeys, BlocksWalkingManyBatchesEqualCpu) {
  KVB_REQUIRE_GPU();
  const int batch = 1, hq = 32, hkv = 8, d = 128, length = 200003;
  std::vector<uint64_t> codes(size_t(batch) * hkv * length);
  std::mt19937_64 rng(41);
  for (uint64_t& code : codes) code = rng();
  const std::vector<float> projection =
      random_bf16_values(size_t(batch) * hkv * kBinaryHashBits * d, 42, 1.0f);
  const std::vector<float> q = random_bf16_values(size_t(batch) * hq * d, 43, 2.0f);
  expect_gpu_scores_equal_cpu(codes, cpu_quantized(projection, q, batch, hq, hkv, d),
                              gpu_planes(projection, q, batch, hq, hkv, d), batch, hq, hkv, length);
}

// topk_select against its CPU twin (kernels/cpu/topk_select.h) on lists with many ties, for 16-bit
// keys and f32 scores; with a workspace and without (lengths that give clusters of 1, 2, 4 and 8
// blocks, and the split path).
TEST(TopkSelect, MatchesCpuTopKWithLowerIndexTieBreak) {
  KVB_REQUIRE_GPU();
  std::mt19937 rng(4);
  for (const int length : {1, 7, 1000, 8192, 12000, 30000, 70001, 300000}) {
    for (const int k : {1, length / 3, length - 1, length}) {
      if (k < 1) continue;
      const int lists = 3, tail = 2;
      std::vector<uint16_t> keys(size_t(lists) * length);
      std::vector<float> scores(keys.size());
      for (size_t n = 0; n < keys.size(); ++n) {
        keys[n] = static_cast<uint16_t>(rng() % 50 + (n % 5 == 0 ? 65000 : 30000));
        // Many ties, and both zeros (x * -1 gives -0 for x = 0; -0 and +0 tie as on the CPU).
        scores[n] = float(int(rng() % 41) - 20) * 0.25f * (n % 7 == 0 ? -1.0f : 1.0f);
      }
      for (const int variant : {0, 1, 2, 3}) {
        const bool use_float = variant & 1, split = variant & 2;  // split: with a workspace
        auto d_keys = test::to_device(keys);
        auto d_scores = test::to_device(scores);
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
        cuda::DeviceBuffer workspace(cuda::topk_select_workspace_bytes(lists, length));
        if (split) args.workspace = workspace.data();
        cuda::topk_select(args, nullptr);
        cuda::check(cudaDeviceSynchronize(), "sync");
        std::vector<int32_t> got(size_t(lists) * stride);
        std::vector<int64_t> offsets(lists * 2);
        std::vector<int32_t> counts(lists * 2);
        d_out.download(got.data(), got.size() * 4);
        d_offset.download(offsets.data(), offsets.size() * 8);
        d_count.download(counts.data(), counts.size() * 4);
        for (int l = 0; l < lists; ++l) {
          std::vector<float> ranking(length);
          for (int j = 0; j < length; ++j)
            ranking[j] =
                use_float ? scores[size_t(l) * length + j] : float(keys[size_t(l) * length + j]);
          std::vector<int32_t> want = kernels::topk_select(ranking.data(), length, k);
          want.push_back(length);
          want.push_back(length + 1);
          const std::vector<int32_t> list(got.begin() + l * stride, got.begin() + (l + 1) * stride);
          EXPECT_EQ(list, want) << "length " << length << " k " << k << " list " << l << " float "
                                << use_float << " split " << split;
          for (int r = 0; r < 2; ++r) {
            EXPECT_EQ(offsets[l * 2 + r], l * stride);
            EXPECT_EQ(counts[l * 2 + r], k + tail);
          }
        }
      }
    }
  }
}

// The whole decode step against the CPU BinaryPcSelector and CPU attention.
struct SelectCase {
  int n_query_heads, n_kv_heads, head_dim, prompt, decoded, budget;
  bool eas;
};
class BinaryPcSelectionTest : public ::testing::TestWithParam<SelectCase> {};

TEST_P(BinaryPcSelectionTest, IndexListsAndAttentionMatchCpuSelector) {
  KVB_REQUIRE_GPU();
  const SelectCase c = GetParam();
  const int hq = c.n_query_heads, hkv = c.n_kv_heads, d = c.head_dim, group = hq / hkv;
  const int length = c.prompt + c.decoded, capacity = length + 8;
  test::RandomLayerCache cache(hkv, d, capacity, 31);
  const std::vector<float>& k_all = cache.k_all;
  const std::vector<float>& v_all = cache.v_all;
  KvStore& store = cache.store;
  for (int j = 0; j < c.prompt; ++j) cache.append(j);
  auto projection_set = std::make_shared<BinaryProjectionSet>(1, hkv, d);
  for (int h = 0; h < hkv; ++h) {
    BinaryProjectionFit fit;
    fit.seed = 5 + h;
    fit_binary_projection(store.keys(0, h), c.prompt, d, fit, projection_set->mutable_head(0, h));
  }
  auto selector =
      make_binarypc_selector({{"dense_layers", nlohmann::json::array()}, {"eas", c.eas}},
                             Budget::parse(std::to_string(c.budget)), projection_set);
  selector->start(store, c.prompt, c.budget);
  for (int j = c.prompt; j < length; ++j) {
    cache.append(j);
    selector->on_append(store, 0);
  }
  const std::vector<float> q = random_bf16_values(size_t(hq) * d, 33, 2.0f);
  Selection cpu = [&] {
    Selection selection;
    selection.indices.resize(hq);
    selector->select(0, q.data(), store, selection);
    return selection;
  }();

  // GPU: codes (+ errors) after prefill, EAS set as a mask, then the decode step.
  auto d_k = test::to_device_bf16(k_all), d_v = test::to_device_bf16(v_all),
       d_q = test::to_device_bf16(q);
  auto d_projection = test::to_device(projection_set->rows);
  cuda::DeviceBuffer d_codes(size_t(hkv) * capacity * 8), d_error(size_t(hkv) * capacity * 4);
  cuda::BinaryHashKeysArgs hash;
  hash.projection = d_projection.as<float>();
  hash.keys = d_k.as<__nv_bfloat16>();
  hash.key_slot_stride = int64_t(capacity) * d;
  hash.n_slots = hkv;
  hash.head_dim = d;
  hash.begin = 0;
  hash.end = c.prompt;
  hash.codes = d_codes.as<uint64_t>();
  hash.code_slot_stride = capacity;
  hash.reconstruction_error = d_error.as<float>();
  cuda::binary_hash_keys(hash, nullptr);
  const int k = std::min(c.budget, c.prompt);
  const int err_k = std::min(std::max(int(0.1 * k), 1), c.prompt);
  const int words = (capacity + 31) / 32;
  cuda::DeviceBuffer d_mask(size_t(hkv) * words * 4), d_eas(size_t(hkv) * err_k * 4);
  cuda::check(cudaMemset(d_mask.data(), 0, d_mask.bytes()), "memset");
  if (c.eas) {
    cuda::TopkSelectArgs eas;
    eas.scores = d_error.as<float>();
    eas.key_stride = capacity;
    eas.n_lists = hkv;
    eas.length = c.prompt;
    eas.k = err_k;
    eas.indices = d_eas.as<int32_t>();
    eas.index_stride = err_k;
    cuda::topk_select(eas, nullptr);
    cuda::binary_mark_tokens(d_eas.as<int32_t>(), err_k, hkv, err_k, d_mask.as<uint32_t>(), words,
                             nullptr);
  }
  cuda::DeviceBuffer d_planes(size_t(hq) * cuda::kSignCodePlanes * 8),
      d_scores(size_t(hkv) * capacity * 2);
  cuda::BinaryPackQueriesArgs pack;
  pack.projection = d_projection.as<float>();
  pack.q = d_q.as<__nv_bfloat16>();
  pack.q_seq_stride = int64_t(hq) * d;
  pack.batch = 1;
  pack.n_query_heads = hq;
  pack.n_kv_heads = hkv;
  pack.head_dim = d;
  pack.planes = d_planes.as<uint64_t>();
  cuda::binary_pack_queries(pack, nullptr);
  cuda::BinaryScoreKeysArgs score;
  score.planes = d_planes.as<uint64_t>();
  score.codes = d_codes.as<uint64_t>();
  score.code_slot_stride = capacity;
  score.forced_mask = d_mask.as<uint32_t>();
  score.mask_slot_stride = words;
  score.batch = 1;
  score.n_query_heads = hq;
  score.n_kv_heads = hkv;
  score.length = c.prompt;
  score.keys = d_scores.as<uint16_t>();
  score.key_slot_stride = capacity;
  cuda::binary_score_keys(score, nullptr);
  const int list_capacity = k + c.decoded;
  cuda::DeviceBuffer d_indices(size_t(hkv) * list_capacity * 4), d_offset(size_t(hq) * 8),
      d_count(size_t(hq) * 4);
  cuda::TopkSelectArgs select;
  select.keys16 = d_scores.as<uint16_t>();
  select.key_stride = capacity;
  select.n_lists = hkv;
  select.length = c.prompt;
  select.k = k;
  select.tail_begin = c.prompt;
  select.tail_count = c.decoded;
  select.indices = d_indices.as<int32_t>();
  select.index_stride = list_capacity;
  select.heads_per_list = group;
  select.index_offset = d_offset.as<int64_t>();
  select.index_count = d_count.as<int32_t>();
  cuda::topk_select(select, nullptr);

  test::DeviceSelection gpu{&d_indices, &d_offset, &d_count, hkv, list_capacity};
  test::expect_sparse_attention_matches_cpu(q, d_q, d_k, d_v, store, hq, hkv, d, length, capacity, gpu,
                                            cpu);
}

INSTANTIATE_TEST_SUITE_P(Cases, BinaryPcSelectionTest,
                         ::testing::Values(SelectCase{8, 2, 128, 3000, 3, 256, true},
                                           SelectCase{8, 2, 128, 3000, 3, 256, false},
                                           SelectCase{6, 2, 64, 700, 1, 1000,
                                                      true},  // budget > prompt
                                           SelectCase{32, 8, 128, 2048, 5, 100, true},
                                           SelectCase{4, 4, 64, 513, 0, 1, true}));

}  // namespace
}  // namespace kvb
