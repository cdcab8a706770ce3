// Quest's GPU kernels (kernels/cuda/page_bounds.h) against the CPU twins
// (kernels/cpu/page_bounds.h) and the CPU selector (policies/quest.cc): page min/max built after
// prefill and kept current token by token equal the CPU's exactly, page upper bounds equal (same
// f32 summation order), the selected token lists equal the CPU QuestSelector's (per_head / shared
// GQA, keep_last_page off / on, budgets under 3 pages and above the length) and decode_attention
// over them is within bf16 tolerance of the CPU attention.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/kv_store.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/page_bounds.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/page_bounds.h"
#include "kernels/cuda/topk_select.h"
#include "policies/decode_selectors.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/sparse_attention_check.h"

namespace kvb {
namespace {

using test::random_bf16_values;

constexpr int kPage = 16;

// Device page bounds for [slots, max_pages, d], built over [0, prompt) then token by token.
struct DevicePages {
  DevicePages(const cuda::DeviceBuffer& keys, int slots, int capacity, int d)
      : max_pages((capacity + kPage - 1) / kPage),
        minimum(size_t(slots) * max_pages * d * 2),
        maximum(size_t(slots) * max_pages * d * 2) {
    args.keys = keys.as<__nv_bfloat16>();
    args.key_slot_stride = int64_t(capacity) * d;
    args.n_slots = slots;
    args.head_dim = d;
    args.page_size = kPage;
    args.page_min = minimum.as<__nv_bfloat16>();
    args.page_max = maximum.as<__nv_bfloat16>();
    args.page_slot_stride = int64_t(max_pages) * d;
    args.max_pages = max_pages;
  }
  // Slot s's bounds as [n_pages, d] rows (undoing the chunk-major layout).
  std::vector<float> rows(const cuda::DeviceBuffer& bounds, int slot, int n_pages, int d) const {
    const std::vector<float> all = test::from_device_bf16(bounds, bounds.bytes() / 2);
    std::vector<float> out(size_t(n_pages) * d);
    for (int p = 0; p < n_pages; ++p)
      for (int t = 0; t < d; ++t)
        out[size_t(p) * d + t] =
            all[slot * args.page_slot_stride + cuda::page_bound_offset(p, t, max_pages)];
    return out;
  }
  void add(int begin, int end) {
    args.begin = begin;
    args.end = end;
    cuda::update_page_bounds(args, nullptr);
  }
  int max_pages;
  cuda::DeviceBuffer minimum, maximum;
  cuda::PageBoundsArgs args;
};

std::vector<float> page_scores(const DevicePages& pages, const std::vector<float>& q, int hq,
                               int hkv, int d, int n_pages, bool shared, bool keep_last_page) {
  auto d_q = test::to_device_bf16(q);
  const int lists = shared ? hkv : hq;
  cuda::DeviceBuffer d_scores(size_t(lists) * n_pages * 4);
  cuda::PageScoreArgs args;
  args.q = d_q.as<__nv_bfloat16>();
  args.q_seq_stride = int64_t(hq) * d;
  args.batch = 1;
  args.n_query_heads = hq;
  args.n_kv_heads = hkv;
  args.head_dim = d;
  args.page_min = pages.minimum.as<__nv_bfloat16>();
  args.page_max = pages.maximum.as<__nv_bfloat16>();
  args.page_slot_stride = pages.args.page_slot_stride;
  args.max_pages = pages.max_pages;
  args.n_pages = n_pages;
  args.shared = shared;
  args.keep_last_page = keep_last_page;
  args.scores = d_scores.as<float>();
  args.score_stride = n_pages;
  cuda::page_bound_scores(args, nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  std::vector<float> scores(size_t(lists) * n_pages);
  d_scores.download(scores.data(), scores.size() * 4);
  return scores;
}

TEST(QuestPages, BoundsKeptCurrentTokenByTokenAndScoresEqualCpu) {
  KVB_REQUIRE_GPU();
  for (const int d : {128, 64}) {
    const int hkv = 2, hq = 6, group = hq / hkv, prompt = 1000, decoded = 40,
              length = prompt + decoded;
    const std::vector<float> keys = random_bf16_values(size_t(hkv) * length * d, 41, 2.0f);
    auto d_keys = test::to_device_bf16(keys);
    DevicePages pages(d_keys, hkv, length, d);
    pages.add(0, prompt);
    for (int j = prompt; j < length; ++j) pages.add(j, j + 1);
    const int n_pages = (length + kPage - 1) / kPage;
    const std::vector<float> q = random_bf16_values(size_t(hq) * d, 42, 2.0f);
    const std::vector<float> per_head = page_scores(pages, q, hq, hkv, d, n_pages, false, false);
    const std::vector<float> shared = page_scores(pages, q, hq, hkv, d, n_pages, true, true);
    for (int h = 0; h < hkv; ++h) {
      kernels::PageBounds bounds{.page_size = kPage, .head_dim = d};
      kernels::update_page_bounds(bounds, keys.data() + int64_t(h) * length * d, 0, length);
      ASSERT_EQ(bounds.n_pages(), n_pages);
      EXPECT_EQ(pages.rows(pages.minimum, h, n_pages, d), bounds.minimum)
          << "d " << d << " head " << h;
      EXPECT_EQ(pages.rows(pages.maximum, h, n_pages, d), bounds.maximum)
          << "d " << d << " head " << h;
      std::vector<float> group_max(n_pages, -std::numeric_limits<float>::infinity());
      for (int g = 0; g < group; ++g) {
        const int a = h * group + g;
        const std::vector<float> expected =
            kernels::page_bound_scores(bounds, q.data() + int64_t(a) * d);
        const std::vector<float> got(per_head.begin() + int64_t(a) * n_pages,
                                     per_head.begin() + int64_t(a + 1) * n_pages);
        EXPECT_EQ(got, expected) << "d " << d << " query head " << a;
        for (int p = 0; p < n_pages; ++p) group_max[p] = std::max(group_max[p], expected[p]);
      }
      group_max[n_pages - 1] = std::numeric_limits<float>::infinity();  // keep_last_page
      const std::vector<float> got(shared.begin() + int64_t(h) * n_pages,
                                   shared.begin() + int64_t(h + 1) * n_pages);
      EXPECT_EQ(got, group_max) << "shared, d " << d << " head " << h;
    }
  }
}

struct QuestCase {
  int n_query_heads, n_kv_heads, head_dim, prompt, decoded, budget;
  bool shared, keep_last_page;
};
class QuestSelectionTest : public ::testing::TestWithParam<QuestCase> {};

TEST_P(QuestSelectionTest, IndexListsAndAttentionMatchCpuSelector) {
  KVB_REQUIRE_GPU();
  const QuestCase c = GetParam();
  const int hq = c.n_query_heads, hkv = c.n_kv_heads, d = c.head_dim, group = hq / hkv;
  const int length = c.prompt + c.decoded, capacity = length + 5;
  test::RandomLayerCache cache(hkv, d, capacity, 51);
  const std::vector<float>& k_all = cache.k_all;
  const std::vector<float>& v_all = cache.v_all;
  KvStore& store = cache.store;
  auto d_k = test::to_device_bf16(k_all), d_v = test::to_device_bf16(v_all);
  DevicePages pages(d_k, hkv, capacity, d);

  for (int j = 0; j < c.prompt; ++j) cache.append(j);
  auto selector = make_quest_selector({{"dense_layers", nlohmann::json::array()},
                                       {"gqa", c.shared ? "shared" : "per_head"},
                                       {"keep_last_page", c.keep_last_page}},
                                      Budget::parse(std::to_string(c.budget)));
  selector->start(store, c.prompt, c.budget);
  pages.add(0, c.prompt);
  for (int j = c.prompt; j < length; ++j) {
    cache.append(j);
    selector->on_append(store, 0);
    pages.add(j, j + 1);
  }
  const std::vector<float> q = random_bf16_values(size_t(hq) * d, 53, 2.0f);
  Selection cpu;
  cpu.indices.resize(hq);
  selector->select(0, q.data(), store, cpu);

  const int n_pages = (length + kPage - 1) / kPage;
  const int page_budget = cuda::pages_for_budget(length, c.budget, kPage, 3);
  const int lists = c.shared ? hkv : hq;
  auto d_q = test::to_device_bf16(q);
  cuda::DeviceBuffer d_scores(size_t(lists) * n_pages * 4),
      d_pages(size_t(lists) * page_budget * 4);
  cuda::PageScoreArgs score;
  score.q = d_q.as<__nv_bfloat16>();
  score.q_seq_stride = int64_t(hq) * d;
  score.batch = 1;
  score.n_query_heads = hq;
  score.n_kv_heads = hkv;
  score.head_dim = d;
  score.page_min = pages.minimum.as<__nv_bfloat16>();
  score.page_max = pages.maximum.as<__nv_bfloat16>();
  score.page_slot_stride = pages.args.page_slot_stride;
  score.max_pages = pages.max_pages;
  score.n_pages = n_pages;
  score.shared = c.shared;
  score.keep_last_page = c.keep_last_page;
  score.scores = d_scores.as<float>();
  score.score_stride = n_pages;
  cuda::page_bound_scores(score, nullptr);
  cuda::TopkSelectArgs top;
  top.scores = d_scores.as<float>();
  top.key_stride = n_pages;
  top.n_lists = lists;
  top.length = n_pages;
  top.k = page_budget;
  top.indices = d_pages.as<int32_t>();
  top.index_stride = page_budget;
  cuda::topk_select(top, nullptr);
  const int list_capacity = page_budget * kPage;
  cuda::DeviceBuffer d_indices(size_t(lists) * list_capacity * 4), d_offset(size_t(hq) * 8),
      d_count(size_t(hq) * 4);
  cuda::ExpandPagesArgs expand;
  expand.pages = d_pages.as<int32_t>();
  expand.page_stride = page_budget;
  expand.n_lists = lists;
  expand.n_selected = page_budget;
  expand.page_size = kPage;
  expand.length = length;
  expand.indices = d_indices.as<int32_t>();
  expand.index_stride = list_capacity;
  expand.heads_per_list = c.shared ? group : 1;
  expand.index_offset = d_offset.as<int64_t>();
  expand.index_count = d_count.as<int32_t>();
  cuda::expand_pages(expand, nullptr);

  test::DeviceSelection gpu{&d_indices, &d_offset, &d_count, lists, list_capacity};
  test::expect_sparse_attention_matches_cpu(q, d_q, d_k, d_v, store, hq, hkv, d, length, capacity, gpu,
                                            cpu);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QuestSelectionTest,
    ::testing::Values(QuestCase{8, 2, 128, 3000, 7, 256, false, false},
                      QuestCase{8, 2, 128, 3000, 7, 256, true, false},
                      QuestCase{8, 2, 128, 3001, 0, 256, false, true},
                      QuestCase{6, 2, 64, 500, 3, 20, false, false},     // 3-page floor
                      QuestCase{32, 8, 128, 2000, 9, 4096, true, true},  // budget > length
                      QuestCase{4, 4, 64, 40, 1, 16, false, false}));

}  // namespace
}  // namespace kvb
