// Quest's GPU decode step (kernels/cuda/page_bounds.h, the shared top-k kernels/cuda/topk_select.h)
// against the CPU QuestSelector (policies/quest.cc): the selected token lists equal the CPU's
// (per_head / shared GQA, keep_last_page off / on, budgets under 3 pages and above the length) and
// decode_attention over them is within bf16 tolerance of the CPU attention. Each kernel against its
// CPU twin (kernels/cpu/page_bounds.h): tests/cuda/backend_ops_test.cc.
#include <gtest/gtest.h>

#include "engine/kv_store.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/page_bounds.h"
#include "kernels/cuda/topk_select.h"
#include "policies/decode_selectors.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/page_bounds_check.h"
#include "tests/cuda/sparse_attention_check.h"

namespace kvb {
namespace {

using test::DevicePages;
using test::random_bf16_values;

constexpr int kPage = 16;

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
  DevicePages pages(d_k, hkv, capacity, d, kPage);

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
  test::score_pages(pages, d_q, hq, hkv, d, n_pages, c.shared, c.keep_last_page, d_scores);
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
  test::expect_sparse_attention_matches_cpu(q, d_q, d_k, d_v, store, hq, hkv, d, length, capacity,
                                            gpu, cpu);
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
