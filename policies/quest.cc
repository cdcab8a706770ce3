// Quest (Tang et al. 2024; docs/methods.md §10) — kind D, the whole cache stays resident.
//
// Pages of P = 16 entries aligned from the first one; per page and KV head the elementwise
// minimum m and maximum M of the keys. A query q bounds every key of a page from above:
//   U(page) = sum_i max(q_i m_i, q_i M_i) >= max_{j in page} q.k_j.
// Per step: B = min(T, token budget), K_p = min(max(3, floor(B / 16)), n_pages) pages with the
// largest U, exact softmax over their entries. Decode tokens join the pages (the page a token
// touches is rebuilt from its first entry, as on the device: kernels/cpu/page_bounds.h). Dense
// layers {0, 1}.
// Variants recorded in the parameters: gqa "per_head" (reference: each query head its own pages,
// the union is loaded) or "shared" (max of U over the group); keep_last_page false (accuracy
// reference) or true (the kernel version: the last page always counts inside the page budget).
// Source: mit-han-lab/Quest evaluation/quest_attention.py, quest/utils/controller.py.
#include <algorithm>
#include <limits>

#include "kernels/cpu/page_bounds.h"
#include "kernels/cpu/topk_select.h"
#include "policies/decode_selector_common.h"
#include "policies/decode_selectors.h"
#include "policies/methods.h"
#include "policies/selection.h"

namespace kvb {
namespace {

nlohmann::json quest_defaults() {
  return {{"page_size", 16},
          {"min_pages", 3},
          {"dense_layers", {0, 1}},
          {"gqa", "per_head"},
          {"keep_last_page", false}};
}

class QuestSelector : public ParamDecodeSelector {
 public:
  QuestSelector(const nlohmann::json& params, const Budget& budget)
      : ParamDecodeSelector("quest", params, quest_defaults(), budget) {
    page_size_ = integer_at_least(params_, "page_size", 1);
    min_pages_ = integer_at_least(params_, "min_pages", 1);
    gqa_ = read_gqa_selection(params_);
    keep_last_page_ = params_.boolean("keep_last_page");
  }

  bool runs_on_device() const override { return true; }
  std::optional<DeviceSelectionSpec> device_selection(const ModelConfig&,
                                                      int budget_tokens) const override {
    DeviceSelectionSpec spec =
        device_selection_of(DeviceSelectionSpec::Scores::kPageBounds, budget_tokens, dense_layers_);
    spec.pages.page_size = page_size_;
    spec.pages.min_pages = min_pages_;
    spec.pages.keep_last_page = keep_last_page_;
    spec.shared_group = gqa_ == GqaSelection::kShared;
    return spec;
  }

  void start(const KvStore& store, int, int budget_tokens) override {
    token_budget_ = budget_tokens;
    const int d = store.head_dim();
    pages_.assign(store.n_layers(), std::vector<kernels::PageBounds>(store.n_kv_heads()));
    for (int layer = 0; layer < store.n_layers(); ++layer) {
      if (is_dense_layer(dense_layers_, layer)) continue;
      for (int h = 0; h < store.n_kv_heads(); ++h) {
        kernels::PageBounds& bounds = pages_[layer][h];
        bounds = kernels::PageBounds{.page_size = page_size_, .head_dim = d};
        kernels::update_page_bounds(bounds, store.keys(layer, h), 0, store.length(layer, h));
      }
    }
  }

  void on_append(const KvStore& store, int layer) override {
    if (is_dense_layer(dense_layers_, layer)) return;
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const int length = store.length(layer, h);
      kernels::update_page_bounds(pages_[layer][h], store.keys(layer, h), length - 1, length);
    }
  }

  void select(int layer, const float* query, const KvStore& store, Selection& out) override {
    const int group = begin_selection(layer, store, out);
    if (group == 0) return;  // a dense layer
    const int d = store.head_dim();
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const kernels::PageBounds& bounds = pages_[layer][h];
      const int length = store.length(layer, h);
      const int n_pages = bounds.n_pages();
      const int budget = std::min(length, token_budget_);
      const int page_budget = std::min(std::max(min_pages_, budget / page_size_), n_pages);
      std::vector<std::vector<float>> scores(group);
      for (int g = 0; g < group; ++g)
        scores[g] =
            kernels::page_bound_scores(bounds, query + static_cast<int64_t>(h * group + g) * d);
      if (gqa_ == GqaSelection::kShared) {
        for (int g = 1; g < group; ++g)
          for (int p = 0; p < n_pages; ++p) scores[0][p] = std::max(scores[0][p], scores[g][p]);
        const std::vector<int32_t> tokens = pick_pages(scores[0], page_budget, length);
        for (int g = 0; g < group; ++g) out.indices[h * group + g] = tokens;
      } else {
        for (int g = 0; g < group; ++g)
          out.indices[h * group + g] = pick_pages(scores[g], page_budget, length);
      }
    }
  }

 private:
  std::vector<int32_t> pick_pages(std::vector<float> scores, int page_budget, int length) const {
    const int n_pages = static_cast<int>(scores.size());
    if (keep_last_page_ && n_pages > 0)
      scores[n_pages - 1] = std::numeric_limits<float>::infinity();
    return kernels::expand_pages(kernels::topk_select(scores.data(), n_pages, page_budget),
                                 page_size_, length);
  }

  int token_budget_ = 0;
  int page_size_ = 16;
  int min_pages_ = 3;
  GqaSelection gqa_ = GqaSelection::kPerHead;
  bool keep_last_page_ = false;
  std::vector<std::vector<kernels::PageBounds>> pages_;  // [layer][kv head]
};

}  // namespace

std::shared_ptr<DescribedDecodeSelector> make_quest_selector(const nlohmann::json& params,
                                                             const Budget& budget) {
  return std::make_shared<QuestSelector>(params, budget);
}

PolicyFactory quest_factory() {
  return decode_selector_factory(
      {"quest", "pages of 16 keys ranked by a min/max upper bound of q.k per decode step",
       "mit-han-lab/Quest evaluation/quest_attention.py, quest/utils/controller.py"},
      quest_defaults(), make_quest_selector);
}

}  // namespace kvb
