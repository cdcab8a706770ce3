// The device form of each decode-time eviction (DecodeEvictionPolicy::device_eviction,
// engine/device_eviction.h) keeps what the policy's own after_step() keeps. A device engine's step
// (engine/cuda/cuda_decode_eviction.h) is emulated with the kernels' CPU twins
// (kernels/cpu/decode_eviction.h): each layer's statistic from the step's probabilities, then
// evict_to_keep with the spec's keep count and protected entries, the entries carrying their
// positions as ids. After a prefill selection on a synthetic prompt, a question appended past the
// budget and 24 decode steps on the same random probabilities, both hold the same positions per
// (layer, KV head) at every step: H2O's accumulated sums (from the prefill's column sums), TOVA's
// layer mean with a dense layer, CAKE's pooled group mean with its per-layer budgets in both
// precisions. Every registered decode eviction has a device form (what the sweep's device check
// asks of a plan).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kernels/cpu/decode_eviction.h"
#include "policies/registry.h"
#include "tests/policies/decode_test_util.h"
#include "tests/policies/synthetic_prefill.h"

namespace kvb {
namespace {

constexpr int kLayers = 3, kQueryHeads = 4, kKvHeads = 2, kLength = 48, kDim = 8;
constexpr int kQuestion = 3, kSteps = 24, kBudget = 16, kCapacity = kLength + kQuestion + kSteps;

// One sequence's evicting layers as a device holds them: per layer the slots' ids (positions),
// lengths and statistic, rows of one dummy float.
struct EmulatedDevice {
  DeviceEvictionSpec spec;
  std::vector<std::vector<int32_t>> ids, lengths;
  std::vector<std::vector<float>> scores;
  std::vector<float> rows = std::vector<float>(kKvHeads * kCapacity, 0.0f);
  std::vector<int64_t> offsets = {0, kCapacity};

  EmulatedDevice(DeviceEvictionSpec s, const KvStore& store) : spec(std::move(s)) {
    ids.assign(kLayers, std::vector<int32_t>(kKvHeads * kCapacity, -1));
    lengths.assign(kLayers, std::vector<int32_t>(kKvHeads));
    scores.assign(kLayers, std::vector<float>(kKvHeads * kCapacity, 0.0f));
    for (int l = 0; l < kLayers; ++l)
      for (int h = 0; h < kKvHeads; ++h) {
        lengths[l][h] = store.length(l, h);
        std::copy_n(store.positions(l, h), lengths[l][h], ids[l].begin() + h * kCapacity);
        if (l < static_cast<int>(spec.initial.size()))  // the accumulated statistic's start
          std::copy(spec.initial[l][h].begin(), spec.initial[l][h].end(),
                    scores[l].begin() + h * kCapacity);
      }
  }

  // The step of `layer` after its token (at `position`) was appended: p is [Hq, kCapacity].
  void step(int layer, const std::vector<float>& p, int32_t position) {
    for (int h = 0; h < kKvHeads; ++h) ++lengths[layer][h];
    if (!spec.evicts(layer)) {  // a dense layer: the device runs nothing, the entries stay
      for (int h = 0; h < kKvHeads; ++h)
        ids[layer][h * kCapacity + lengths[layer][h] - 1] = position;
      return;
    }
    // The arguments as the engine sets them (engine/cuda/cuda_decode_eviction.cu), on the twins.
    kernels::EvictionScoresArgs statistic{.probabilities = p.data(),
                                          .probability_stride = kCapacity,
                                          .lengths = lengths[layer].data(),
                                          .batch = 1,
                                          .n_query_heads = kQueryHeads,
                                          .n_kv_heads = kKvHeads,
                                          .scores = scores[layer].data(),
                                          .score_stride = kCapacity};
    set_scores_rule(spec, statistic);
    kernels::eviction_scores(statistic);
    kernels::EvictToKeepArgs evict{.keys = rows.data(),
                                   .values = rows.data(),
                                   .kv_offset = offsets.data(),
                                   .lengths = lengths[layer].data(),
                                   .n_slots = kKvHeads,
                                   .head_dim = 1,
                                   .scores = scores[layer].data(),
                                   .score_stride = kCapacity,
                                   .entry_ids = ids[layer].data(),
                                   .appended_ids = &position,
                                   .n_kv_heads = kKvHeads};
    set_keep_rule(spec, layer, evict);
    kernels::evict_to_keep(evict);
  }

  std::vector<int32_t> held(int layer, int head) const {
    const auto first = ids[layer].begin() + head * kCapacity;
    return {first, first + lengths[layer][head]};
  }
};

// Random attention rows of every query head over its KV head's entries.
std::vector<float> random_probabilities(const KvStore& store, int layer, std::mt19937& rng) {
  std::exponential_distribution<float> weight(1.0f);
  std::vector<float> p(size_t(kQueryHeads) * kCapacity, 0.0f);
  for (int a = 0; a < kQueryHeads; ++a) {
    const int length = store.length(layer, a / (kQueryHeads / kKvHeads));
    float sum = 0;
    for (int j = 0; j < length; ++j) sum += p[a * kCapacity + j] = weight(rng);
    for (int j = 0; j < length; ++j) p[a * kCapacity + j] /= sum;
  }
  return p;
}

void expect_same_as_after_step(const std::string& policy, const nlohmann::json& params) {
  SCOPED_TRACE(policy + " " + params.dump());
  test::SyntheticPrefill prompt(kLayers, kQueryHeads, kKvHeads, kLength, kDim, 8, 21);
  std::mt19937 rng(4);
  for (auto& sums : prompt.column_sums)
    for (auto& x : sums) x = float(rng() % 9) * 0.5f;  // ties among H2O's prefill sums
  CachePlan plan = make_cache_plan(policy, params, Budget::parse(std::to_string(kBudget)));
  ASSERT_TRUE(plan.decode_eviction);
  ASSERT_TRUE(plan.decode_eviction->runs_on_device());
  const KeptIndices kept = plan.prefill->select(prompt.view, kBudget);
  KvStore store = test::random_store(kLayers, kKvHeads, kDim, kLength, 5);
  for (int l = 0; l < kLayers; ++l) store.compact(l, kept[l], kQuestion + kSteps);
  const std::vector<float> k = test::random_vector(kKvHeads * kDim, 6);
  for (int t = 0; t < kQuestion; ++t)  // a question past the budget: the first step evicts more
    for (int l = 0; l < kLayers; ++l) store.append(l, kLength + t, k.data(), k.data());

  const std::optional<DeviceEvictionSpec> spec =
      plan.decode_eviction->device_eviction(kLayers, kBudget);
  ASSERT_TRUE(spec);
  EmulatedDevice device(*spec, store);
  plan.decode_eviction->start(store, kLength + kQuestion, kBudget);
  int evicting_steps = 0;
  for (int t = 0; t < kSteps; ++t) {
    const int position = kLength + kQuestion + t;
    for (int l = 0; l < kLayers; ++l) {
      store.append(l, position, k.data(), k.data());
      const std::vector<float> p = random_probabilities(store, l, rng);
      DecodeStepView view;
      view.layer = l;
      view.step = t;
      for (int a = 0; a < kQueryHeads; ++a) view.probabilities.push_back(&p[a * kCapacity]);
      const int before = store.length(l, 0);
      plan.decode_eviction->after_step(view, store);
      evicting_steps += store.length(l, 0) < before;
      device.step(l, p, position);
      for (int h = 0; h < kKvHeads; ++h) {
        const std::vector<int32_t> cpu(store.positions(l, h),
                                       store.positions(l, h) + store.length(l, h));
        ASSERT_EQ(device.held(l, h), cpu) << "step " << t << " layer " << l << " head " << h;
        ASSERT_EQ(kernels::evicted_length(before, spec->keep[l], spec->sinks, spec->recent),
                  store.length(l, h));
      }
    }
  }
  EXPECT_GT(evicting_steps, kSteps);  // every evicting layer evicted at (nearly) every step
}

TEST(DeviceEviction, H2oDecodeKeepsWhatAfterStepKeeps) {
  expect_same_as_after_step("h2o_decode", nlohmann::json::object());
  expect_same_as_after_step("h2o_decode", {{"recent_ratio", 0.25}});
}

TEST(DeviceEviction, TovaKeepsWhatAfterStepKeeps) {
  expect_same_as_after_step("tova", {{"dense_layers", {0}}});
  expect_same_as_after_step("tova", {{"precision", "bf16"}});
}

TEST(DeviceEviction, CakeKeepsWhatAfterStepKeeps) {
  expect_same_as_after_step("cake", {{"window", 4}, {"dense_layers", {1}}});
  expect_same_as_after_step("cake", {{"window", 4}, {"precision", "fp32"}, {"kernel", 3}});
}

TEST(DeviceEviction, SpecsCarryThePoliciesParameters) {
  CachePlan cake =
      make_cache_plan("cake", {{"window", 4}, {"dense_layers", {2}}}, Budget::parse("16"));
  const auto spec = cake.decode_eviction->device_eviction(kLayers, kBudget);
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->keep, (std::vector<int>{kBudget, kBudget, -1}));  // no prefill: B = S - w
  EXPECT_EQ(spec->recent, 4);
  EXPECT_EQ(spec->pool_kernel, 5);
  EXPECT_TRUE(spec->round_bf16);
  CachePlan h2o = make_cache_plan("h2o_decode", {{"recent_ratio", 0.25}}, Budget::parse("16"));
  const auto h2o_spec = h2o.decode_eviction->device_eviction(kLayers, 40);
  ASSERT_TRUE(h2o_spec);
  EXPECT_EQ(h2o_spec->recent, 10);
  EXPECT_EQ(h2o_spec->keep, (std::vector<int>(kLayers, 40)));
  EXPECT_EQ(h2o_spec->statistic, DeviceEvictionSpec::Statistic::kAccumulatedGroupSum);
}

// What `kvbench run --device cuda` checks before any row (CudaBackend::check_plan, from
// harness/sweep/engine_backend.cc check_device): every registered policy that evicts during decode
// has a device form, one keep count per layer.
TEST(DeviceEviction, EveryRegisteredDecodeEvictionHasADeviceForm) {
  int evicting = 0;
  for (const PolicyInfo& info : list_policies()) {
    CachePlan plan;
    try {
      plan = make_cache_plan(info.name, nlohmann::json::object(), Budget::parse("50%"));
    } catch (const InputError&) {
      continue;  // needs files or parameters of its own (calibrations); none of them evicts
    }
    if (!plan.decode_eviction) continue;
    ++evicting;
    SCOPED_TRACE(info.name);
    EXPECT_TRUE(plan.decode_eviction->runs_on_device());
    const auto spec = plan.decode_eviction->device_eviction(30, 100);
    ASSERT_TRUE(spec);
    EXPECT_EQ(spec->keep.size(), 30u);
  }
  EXPECT_EQ(evicting, 3);  // h2o_decode, tova, cake
}

}  // namespace
}  // namespace kvb
