// The decode selector of README.md's "Adding a method" (a file of its own there, here in a test):
// the README's code, compiled against the project, keeps the most recent tokens of every head, as
// its factory builds it, with the base's dense layers, budget and description.
#include <gtest/gtest.h>

#include <numeric>

#include "common/errors.h"
#include "policies/decode_selector_common.h"
#include "tests/policies/decode_test_util.h"

namespace kvb {
namespace {

// --- README.md, "Adding a method": policies/recent.cc ---
nlohmann::json recent_defaults() { return {{"dense_layers", {0, 1}}}; }

class RecentSelector : public ParamDecodeSelector {
 public:
  RecentSelector(const nlohmann::json& params, const Budget& budget)
      : ParamDecodeSelector("recent", params, recent_defaults(), budget) {}

  void start(const KvStore&, int, int) override {}
  void on_append(const KvStore&, int) override {}

  void select(int layer, const float*, const KvStore& store, Selection& out) override {
    const int group = begin_selection(layer, store, out);
    if (group == 0) return;  // a dense layer
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const int length = store.length(layer, h), k = selection_budget(budget_, length);
      std::vector<int32_t> kept(k);
      std::iota(kept.begin(), kept.end(), length - k);
      for (int g = 0; g < group; ++g) out.indices[h * group + g] = kept;
    }
  }
};

std::shared_ptr<DescribedDecodeSelector> make_recent_selector(const nlohmann::json& params,
                                                              const Budget& budget) {
  return std::make_shared<RecentSelector>(params, budget);
}

PolicyFactory recent_factory() {
  return decode_selector_factory({"recent", "the most recent tokens at every decode step", "none"},
                                 recent_defaults(), make_recent_selector);
}
// --- end of the README's code ---

TEST(SelectorExample, TheFactoryBuildsTheSelectorWithItsBudgetAndDenseLayers) {
  const PolicyFactory factory = recent_factory();
  EXPECT_EQ(factory.info.name, "recent");
  EXPECT_EQ(factory.info.kind, PolicyKind::kDecodeSelection);
  PlanFiles files;
  const std::shared_ptr<DecodeSelector> selector =
      factory.make_selector({{"dense_layers", {0}}}, Budget::parse("25%"), files);
  const int kv_heads = 2, group = 3, d = 8, length = 40;
  KvStore store = test::random_store(2, kv_heads, d, length, 3);
  selector->start(store, length, 10);
  const std::vector<float> query = test::random_vector(kv_heads * group * d, 4);
  Selection selection = test::empty_selection(kv_heads * group);
  selector->select(0, query.data(), store, selection);
  EXPECT_TRUE(selection.dense);
  selector->select(1, query.data(), store, selection);
  ASSERT_FALSE(selection.dense);
  const std::vector<int32_t> last_ten = {30, 31, 32, 33, 34, 35, 36, 37, 38, 39};  // 25% of 40
  for (int a = 0; a < kv_heads * group; ++a) EXPECT_EQ(selection.indices[a], last_ten) << a;
  const auto described = std::dynamic_pointer_cast<DescribedDecodeSelector>(selector);
  ASSERT_NE(described, nullptr);
  EXPECT_EQ(described->describe()["budget"], "25%");
  // json::array: under clang, json({0}) reads the 0 as a null pointer and builds null.
  EXPECT_EQ(described->describe()["dense_layers"], nlohmann::json::array({0}));
}

TEST(SelectorExample, UnknownParametersAreRefusedByTheBase) {
  PlanFiles files;
  EXPECT_THROW(recent_factory().make_selector({{"windw", 3}}, Budget::parse("10"), files),
               InputError);
}

}  // namespace
}  // namespace kvb
