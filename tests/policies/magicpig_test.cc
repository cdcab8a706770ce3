// MagicPIG (docs/methods.md §11): exact set, candidates and importance weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/errors.h"
#include "policies/decode_selectors.h"
#include "tests/policies/decode_test_util.h"

namespace kvb {
namespace {

const nlohmann::json kNoDense = {{"dense_layers", nlohmann::json::array()}};

// With K = 0 bits per table every middle token collides in every table and is sampled with u = 1:
// the importance-weighted softmax is full attention, up to the 1e-4 offset of log(u + 1e-4).
TEST(MagicPigSelector, SamplingEveryTokenReproducesFullAttention) {
  const int kv_heads = 2, group = 2, d = 32, length = 300;
  const KvStore store = test::random_store(1, kv_heads, d, length, 12);
  nlohmann::json params = kNoDense;
  params["K"] = 0;
  params["L"] = 4;
  auto selector = make_magicpig_selector(params, Budget::parse("10%"));
  selector->start(store, length, 30);
  const std::vector<float> query = test::random_vector(kv_heads * group * d, 13, 2.0f);
  Selection selection = test::empty_selection(kv_heads * group);
  selector->select(0, query.data(), store, selection);
  for (int a = 0; a < kv_heads * group; ++a) {
    ASSERT_EQ(selection.indices[a].size(), static_cast<size_t>(length));
    const int h = a / group;
    const std::vector<double> sampled =
        test::reference_attention(query.data() + a * d, store.keys(0, h), store.values(0, h), d,
                                  selection.indices[a], selection.logit_bias[a]);
    const std::vector<double> full = test::reference_attention(
        query.data() + a * d, store.keys(0, h), store.values(0, h), d, test::all_indices(length));
    EXPECT_LT(test::relative_l2(sampled, full), 2e-4) << "query head " << a;
  }
}

// Sinks, the local window and decode tokens are exact (bias 0); a middle key whose centred
// direction equals the query's collides in every table (u = 1, bias -log(1 + 1e-4)).
TEST(MagicPigSelector, ExactSetAndAnAlignedKeyIsAlwaysSampled) {
  const int d = 32, prompt = 400, sinks = 4, local = 64;
  KvStore store = test::random_store(1, 1, d, prompt, 14);
  // Centre of the middle keys, then plant key 200 = mean + 3 q (direction of q after centring).
  const std::vector<float> query = test::random_vector(d, 15);
  auto middle_mean = [&] {
    std::vector<double> mean(d, 0.0);
    for (int j = sinks; j < prompt - local; ++j)
      for (int t = 0; t < d; ++t) mean[t] += store.keys(0, 0)[j * d + t];
    for (double& m : mean) m /= prompt - local - sinks;
    return mean;
  };
  // Iterate: planting the key moves the mean slightly; two passes converge well within float.
  for (int pass = 0; pass < 4; ++pass) {
    const std::vector<double> mean = middle_mean();
    for (int t = 0; t < d; ++t)
      store.mutable_keys(0, 0)[200 * d + t] = static_cast<float>(mean[t] + 3.0 * query[t]);
  }
  auto selector = make_magicpig_selector(kNoDense, Budget::parse("10%"));
  selector->start(store, prompt, 40);
  const std::vector<float> kv = test::random_vector(d, 16);
  store.append(0, prompt, kv.data(), kv.data());
  selector->on_append(store, 0);
  Selection selection = test::empty_selection(1);
  selector->select(0, query.data(), store, selection);
  const std::vector<int32_t>& indices = selection.indices[0];
  const std::vector<float>& bias = selection.logit_bias[0];
  ASSERT_EQ(indices.size(), bias.size());
  std::set<int32_t> exact;
  for (size_t n = 0; n < indices.size(); ++n) {
    const int32_t j = indices[n];
    if (j < sinks || j >= prompt - local) {
      EXPECT_EQ(bias[n], 0.0f) << j;
      exact.insert(j);
    } else {
      EXPECT_GE(bias[n], -std::log(1.0 + 1e-4) - 1e-6) << "u <= 1";
      EXPECT_LE(bias[n], -std::log(1e-4) + 1e-3) << "u >= 0";
    }
    if (j == 200) {
      EXPECT_NEAR(bias[n], -std::log(1.0 + 1e-4), 1e-4);
    }
  }
  EXPECT_EQ(exact.size(), static_cast<size_t>(sinks + local + 1))
      << "sinks, local window, decode token";
  EXPECT_TRUE(std::count(indices.begin(), indices.end(), 200));
  // Few random keys collide in 2 of 150 tables of 10 bits: the sample is a small fraction.
  EXPECT_LT(indices.size() - exact.size(), static_cast<size_t>((prompt - sinks - local) / 4));
}

TEST(MagicPigSelector, BadParametersAreClearErrors) {
  const Budget budget = Budget::parse("10%");
  EXPECT_THROW(make_magicpig_selector({{"threshold", 5}, {"L", 3}}, budget), InputError);
  EXPECT_THROW(make_magicpig_selector({{"K", 40}}, budget), InputError);
  EXPECT_THROW(make_magicpig_selector({{"L", 0}}, budget), InputError);
  EXPECT_THROW(make_magicpig_selector({{"tables", 3}}, budget), InputError);
}

}  // namespace
}  // namespace kvb
