// MagicPIG (docs/methods.md §11): exact set, candidates and importance weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/errors.h"
#include "kernels/cpu/lsh_sampling.h"
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

// The device form (engine/device_selection.h, LSH sampling) run through the CPU twins of its
// kernels (kernels/cpu/lsh_sampling.h) as the engine runs them: the same lists and biases as the
// selector's, at every layer and query head, decode tokens included; the rows are the selector's
// (one set per 16 layers and KV head).
TEST(MagicPigSelector, DeviceFormSelectsWhatTheSelectorSelects) {
  const int layers = 18, kv_heads = 2, group = 3, d = 16, prompt = 260;
  KvStore store = test::random_store(layers, kv_heads, d, prompt, 21);
  const nlohmann::json params = {{"K", 3},     {"L", 10},     {"threshold", 3},
                                 {"sinks", 5}, {"local", 30}, {"dense_layers", {1}}};
  auto selector = make_magicpig_selector(params, Budget::parse("10%"));
  ASSERT_TRUE(selector->runs_on_device());
  const std::optional<DeviceSelectionSpec> spec = selector->device_selection(ModelConfig{}, 100);
  ASSERT_TRUE(spec.has_value());
  ASSERT_EQ(spec->scores, DeviceSelectionSpec::Scores::kLshSampling);
  EXPECT_EQ(spec->dense_layers, std::vector<int>{1});
  const DeviceSelectionSpec::LshSampling& lsh = spec->lsh_sampling;
  EXPECT_EQ(lsh.projection(0, 1, d), lsh.projection(15, 1, d)) << "one set per 16 layers";
  EXPECT_NE(lsh.projection(0, 1, d), lsh.projection(16, 1, d));
  EXPECT_NE(lsh.projection(0, 0, d), lsh.projection(0, 1, d));
  ASSERT_EQ(lsh.projection(3, 0, d)->size(), static_cast<size_t>(3 * 10 * d));
  selector->start(store, prompt, 100);
  for (int layer = 0; layer < layers; ++layer) {
    const std::vector<float> kv = test::random_vector(kv_heads * d, 300 + layer);
    store.append(layer, prompt, kv.data(), kv.data());
  }
  const int begin = std::min(lsh.exact_first, prompt);
  const int end = std::max(begin, prompt - lsh.exact_last);
  int sampled = 0;
  for (int layer = 0; layer < layers; ++layer) {
    const std::vector<float> query = test::random_vector(kv_heads * group * d, 40 + layer, 2.0f);
    Selection selection = test::empty_selection(kv_heads * group);
    selector->select(layer, query.data(), store, selection);
    EXPECT_EQ(selection.dense, layer == 1);
    if (layer == 1) continue;
    for (int h = 0; h < kv_heads; ++h) {
      const kernels::LshTables tables{lsh.projection(layer, h, d)->data(), lsh.bits_per_table,
                                      lsh.tables, d};
      const std::vector<float> mean = kernels::lsh_key_mean(store.keys(layer, h), begin, end, d);
      std::vector<uint16_t> codes(static_cast<size_t>(lsh.tables) * (end - begin));
      std::vector<float> norms(end - begin);
      kernels::lsh_hash_keys(tables, store.keys(layer, h), begin, end, mean.data(), codes.data(),
                             end - begin, norms.data());
      std::vector<uint16_t> query_codes(static_cast<size_t>(group) * lsh.tables);
      const float* queries = query.data() + h * group * d;
      kernels::lsh_hash_queries(tables, queries, group, query_codes.data());
      std::vector<std::vector<int32_t>> indices(group);
      std::vector<std::vector<float>> bias(group);
      kernels::lsh_sample_lists({.tables = tables,
                                 .min_collisions = lsh.min_collisions,
                                 .keys = store.keys(layer, h),
                                 .middle_begin = begin,
                                 .middle_end = end,
                                 .length = store.length(layer, h),
                                 .mean = mean.data(),
                                 .key_codes = codes.data(),
                                 .code_table_stride = end - begin,
                                 .centred_norms = norms.data(),
                                 .queries = queries,
                                 .query_codes = query_codes.data(),
                                 .n_queries = group},
                                indices.data(), bias.data());
      for (int g = 0; g < group; ++g) {
        const int a = h * group + g;
        EXPECT_EQ(selection.indices[a], indices[g]) << "layer " << layer << " head " << a;
        EXPECT_EQ(selection.logit_bias[a], bias[g]) << "layer " << layer << " head " << a;
        sampled += static_cast<int>(indices[g].size()) - (begin + prompt + 1 - end);
      }
    }
  }
  EXPECT_GT(sampled, 0);
}

TEST(MagicPigSelector, BadParametersAreClearErrors) {
  const Budget budget = Budget::parse("10%");
  EXPECT_THROW(make_magicpig_selector({{"threshold", 5}, {"L", 3}}, budget), InputError);
  EXPECT_THROW(make_magicpig_selector({{"K", 17}}, budget), InputError);  // codes are 16-bit
  EXPECT_THROW(make_magicpig_selector({{"L", 0}}, budget), InputError);
  EXPECT_THROW(make_magicpig_selector({{"tables", 3}}, budget), InputError);
}

}  // namespace
}  // namespace kvb
