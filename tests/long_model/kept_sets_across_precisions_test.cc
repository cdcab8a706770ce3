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
    const test::JaccardSummary s = test::compare_kept(on_f32[i], on_device_numerics[i]);
    std::printf(
        "[ jaccard  ] %-12s f32 CPU vs bf16-device CPU (%zu tokens): mean %.4f, worst %.4f, %d of "
        "%d (layer, head) below %.2f\n",
        test::kKeptSetPolicies[i].c_str(), m.prompt.size(), s.mean, s.worst, s.below_bound, s.heads,
        test::kKeptSetJaccardBound);
    EXPECT_GE(s.mean, 0.9);
  }
}

}  // namespace
}  // namespace kvb
