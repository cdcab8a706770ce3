// How much of the GPU-against-CPU kept-set difference (issue 17) any change of rounding makes: two
// CPU forwards of one model that differ only in where they round — f32 throughout, and the GPU's
// rounding points (ForwardPrecision::kBf16Device) — each prefill the GPU test's prompt
// (tests/cuda/real_prompt.h, SmolLM2-135M or $KVB_MODEL) and pick the eight policies' kept sets at
// 20%. No GPU is involved: what differs per (layer, head) here is what rounding alone does to heads
// whose scores hold near-ties at the budget's edge. Printed for results/gpu-sweeps.md; held to a
// mean that a selection gone wrong would miss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/device_numerics.h"
#include "policies/registry.h"
#include "tests/cuda/real_prompt.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

TEST(KeptSetsAcrossPrecisions, RoundingAloneMovesSingleHeadsOfTheCpuKeptSets) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const test::RealModel m = test::real_model();
  CpuBackend f32(*m.model.weights);
  CpuBackend as_device(*m.model.weights, KvDtype::kBf16, ForwardPrecision::kBf16Device);
  std::vector<CachePlan> plans = test::kept_set_plans();
  const std::vector<KeptIndices> on_f32 = test::kept_sets_on(f32, m.prompt, plans);
  const std::vector<KeptIndices> on_device_numerics =
      test::kept_sets_on(as_device, m.prompt, plans);
  ASSERT_EQ(on_f32.size(), plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    SCOPED_TRACE(test::kKeptSetPolicies[i]);
    double sum = 0, worst = 1;
    int heads = 0, below = 0;
    for (size_t l = 0; l < on_f32[i].size(); ++l)
      for (size_t h = 0; h < on_f32[i][l].size(); ++h) {
        const double j = test::jaccard(on_f32[i][l][h], on_device_numerics[i][l][h]);
        sum += j;
        worst = std::min(worst, j);
        below += j < 0.98;
        ++heads;
      }
    std::printf(
        "[ jaccard  ] %-12s f32 CPU vs bf16-device CPU (%zu tokens): mean %.4f, worst %.4f, %d of "
        "%d (layer, head) below 0.98\n",
        test::kKeptSetPolicies[i].c_str(), m.prompt.size(), sum / heads, worst, below, heads);
    EXPECT_GE(sum / heads, 0.9);
  }
}

}  // namespace
}  // namespace kvb
