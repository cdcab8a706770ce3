// BinaryPC's GPU decode step (kernels/cuda/binary_hash.h, the shared top-k
// kernels/cuda/topk_select.h) against the CPU: the query quantisation inside binary_score_keys (its
// rounding and shared scale) on hand-made projections, and selections equal to the CPU
// BinaryPcSelector's (EAS on/off, budget below and above the prompt, decode tokens forced) with
// the sparse decode_attention over them within bf16 tolerance of the CPU attention. Inputs are
// bf16-representable so both sides see the same numbers. Each kernel against its CPU twin over
// many shapes: tests/cuda/backend_ops_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "engine/kv_store.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/binary_hash.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/topk_select.h"
#include "policies/binarypc_projection.h"
#include "policies/decode_selectors.h"
#include "tests/cuda/binary_hash_check.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/sparse_attention_check.h"

namespace kvb {
namespace {

using kernels::kBinaryHashBits;
using test::random_bf16_values;

// Rows e_i make p = q exactly: halves (2.5, 3.5, -2.5, 0.5) must round to even, giving head 0 the
// values (2, 4, -2, 0), and the scale comes from the largest |p| of the whole group (-127, in head
// 1). Head 1 scores -127 h_5, so on codes without bit 5 the max is head 0's sum_i p^_i h_i: 4 with
// no bit set, 4 - 2 p^_i with bit i. Rounding half away from zero would give (3, 4, -3, 1) and 5
// with no bit set; a scale per head would give values near 127.
TEST(BinaryScoreKeys, PacksQueriesHalfToEvenWithOneScalePerGroup) {
  KVB_REQUIRE_GPU();
  for (const int d : {64, 128}) {
    test::ScoreInputs in{.batch = 1, .hq = 2, .hkv = 1, .d = d, .length = 6};
    in.projection.assign(size_t(kBinaryHashBits) * d, 0.0f);
    for (int i = 0; i < kBinaryHashBits; ++i) in.projection[i * d + i] = 1.0f;
    in.q.assign(size_t(in.hq) * d, 0.0f);
    in.q[0] = 2.5f;
    in.q[1] = 3.5f;
    in.q[2] = -2.5f;
    in.q[3] = 0.5f;
    in.q[d + 5] = -127.0f;
    in.codes = {0,
                uint64_t{1} << 0,
                uint64_t{1} << 1,
                uint64_t{1} << 2,
                uint64_t{1} << 3,
                uint64_t{1} << 5};
    const std::vector<int> scores = {4, 0, -4, 8, 4, 127};
    std::vector<uint16_t> expected;
    for (int score : scores) expected.push_back(uint16_t(score + cuda::kSignCodeScoreOffset));
    EXPECT_EQ(test::gpu_score_keys(in), expected) << "d " << d;
    EXPECT_EQ(test::cpu_score_keys(in), expected) << "d " << d;
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
  cuda::DeviceBuffer d_scores(size_t(hkv) * capacity * 2);
  cuda::BinaryScoreKeysArgs score;
  score.projection = d_projection.as<float>();
  score.q = d_q.as<__nv_bfloat16>();
  score.q_seq_stride = int64_t(hq) * d;
  score.head_dim = d;
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
  test::expect_sparse_attention_matches_cpu(q, d_q, d_k, d_v, store, hq, hkv, d, length, capacity,
                                            gpu, cpu);
}

INSTANTIATE_TEST_SUITE_P(Cases, BinaryPcSelectionTest,
                         ::testing::Values(SelectCase{8, 2, 128, 3000, 3, 256, true},
                                           SelectCase{8, 2, 128, 3000, 3, 256, false},
                                           SelectCase{6, 2, 64, 700, 1, 1000,
                                                      true},  // budget > prompt
                                           SelectCase{32, 8, 128, 2048, 5, 100, true},
                                           SelectCase{4, 4, 64, 513, 0, 1, true}));

// The 16-bit path keeps a 65,536-bin histogram per list in its workspace, the radix path for f32
// scores a few KB: a workspace sized for f32 scores handed over with 16-bit keys is refused before
// any kernel could write past it (runs without a GPU: the check comes first).
TEST(TopkSelect, RefusesAWorkspaceSizedForOtherKeys) {
  const int lists = 8, length = 131072;
  const size_t for_f32 = cuda::topk_select_workspace_bytes(lists, length, cuda::TopkKeys::kF32);
  const size_t for_u16 = cuda::topk_select_workspace_bytes(lists, length, cuda::TopkKeys::kU16);
  ASSERT_LT(for_f32, for_u16);
  int placeholder = 0;  // never dereferenced: the call refuses first
  cuda::TopkSelectArgs args;
  args.keys16 = reinterpret_cast<const uint16_t*>(&placeholder);
  args.key_stride = length;
  args.n_lists = lists;
  args.length = length;
  args.k = 2048;
  args.indices = &placeholder;
  args.index_stride = 2048;
  args.workspace = &placeholder;
  args.workspace_bytes = for_f32;
  EXPECT_THROW(cuda::topk_select(args, nullptr), std::invalid_argument);
  args.workspace_bytes = 0;  // a workspace without its size
  EXPECT_THROW(cuda::topk_select(args, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace kvb
