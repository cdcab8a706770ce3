// One prefill for several prefill policies (tests/cuda/real_prompt.h's kept_sets_on, what the GPU
// kept-set test and a sweep sample's cells do): the policies' capture requests merged, each
// policy's kept set equals the one a prefill of its own gives, on the CPU engine and the real model
// (SmolLM2-135M, the first 400 tokens of the GPU test's prompt).
#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "policies/registry.h"
#include "tests/cuda/real_prompt.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

TEST(SharedPrefill, EveryPolicyKeepsWhatItsOwnPrefillKeeps) {
  KVB_REQUIRE_FILE(test::default_model_path());
  test::RealModel m = test::real_model();
  m.prompt.resize(std::min<size_t>(m.prompt.size(), 400));
  CpuBackend cpu(*m.model.weights);
  const std::vector<std::string>& policies = test::kKeptSetPolicies;
  std::vector<CachePlan> plans = test::kept_set_plans();
  const std::vector<KeptIndices> shared = test::kept_sets_on(cpu, m.prompt, plans);
  ASSERT_EQ(shared.size(), plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    SCOPED_TRACE(policies[i]);
    const KeptIndices alone = test::kept_on(cpu, m.prompt, plans[i]);
    EXPECT_EQ(shared[i], alone);
    EXPECT_LT(alone.at(0).at(0).size(), m.prompt.size()) << "the policy compressed";
  }
}

}  // namespace
}  // namespace kvb
