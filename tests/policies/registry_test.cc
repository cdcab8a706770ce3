// Registry and parameter errors: unknown names, unknown parameters, wrong types, missing budgets.
#include "policies/registry.h"

#include <gtest/gtest.h>

#include "common/errors.h"
#include "policies/decode_selectors.h"
#include "policies/params.h"

namespace kvb {
namespace {

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(Registry, UnknownPolicyListsKnownNames) {
  const std::string message = error_of([] { make_cache_plan("snapkvv", {}, Budget::parse("64")); });
  EXPECT_NE(message.find("unknown policy 'snapkvv'"), std::string::npos) << message;
  EXPECT_NE(message.find("snapkv"), std::string::npos) << message;
}

TEST(Registry, UnknownParameterNamesItAndListsKnownOnes) {
  const std::string message = error_of([] {
    make_cache_plan("snapkv", {{"windw", 8}}, Budget::parse("64"));
  });
  EXPECT_NE(message.find("unknown parameter 'windw'"), std::string::npos) << message;
  EXPECT_NE(message.find("window"), std::string::npos) << message;
  EXPECT_NE(message.find("kernel"), std::string::npos) << message;
}

TEST(Registry, WrongTypeAndBadChoiceAreErrors) {
  EXPECT_THROW(make_cache_plan("snapkv", {{"window", "eight"}}, Budget::parse("64")), InputError);
  EXPECT_THROW(make_cache_plan("snapkv", {{"pooling", "median"}}, Budget::parse("64")), InputError);
  EXPECT_THROW(make_cache_plan("full", {{"window", 8}}, std::nullopt), InputError);
}

TEST(Registry, EvictingPolicyNeedsABudgetAndFullDoesNot) {
  EXPECT_THROW(make_cache_plan("snapkv", {}, std::nullopt), InputError);
  const CachePlan full = make_cache_plan("full", {}, std::nullopt);
  EXPECT_FALSE(full.prefill);
  EXPECT_FALSE(full.decode_eviction);
  const CachePlan snap = make_cache_plan("snapkv", {{"window", 8}}, Budget::parse("10%"));
  ASSERT_TRUE(snap.prefill);
  EXPECT_EQ(snap.prefill->name(), "snapkv");
  EXPECT_EQ(snap.prefill->capture().window_queries, 8);
  EXPECT_EQ(snap.label, "snapkv");
}

// The sweep config asks the registry which policies take budgets (harness/sweep/config.cc): the
// same answer make_cache_plan gives, without building a plan.
TEST(Registry, WhichPolicySpecsTakeABudget) {
  EXPECT_FALSE(policy_takes_budget("full"));
  EXPECT_FALSE(policy_takes_budget("full+art"));
  EXPECT_FALSE(policy_takes_budget("art"));  // a kernel-walk modifier alone keeps the whole cache
  EXPECT_TRUE(policy_takes_budget("snapkv"));
  EXPECT_TRUE(policy_takes_budget("snapkv+art"));
  EXPECT_TRUE(policy_takes_budget("binarypc"));
  EXPECT_TRUE(policy_takes_budget("fulll"));  // unknown: building the plan names it
  EXPECT_TRUE(policy_takes_budget("full+"));
  for (const PolicyInfo& info : list_policies()) {
    SCOPED_TRACE(info.name);
    if (policy_takes_budget(info.name))
      EXPECT_THROW(make_cache_plan(info.name, nlohmann::json::object(), std::nullopt), InputError);
    else
      EXPECT_NO_THROW(make_cache_plan(info.name, nlohmann::json::object(), std::nullopt));
  }
}

TEST(Registry, BudgetParsingRejectsNonPositive) {
  EXPECT_THROW(Budget::parse("0"), InputError);
  EXPECT_THROW(Budget::parse("-5"), InputError);
  Budget bad;
  bad.value = 0;
  EXPECT_THROW(make_cache_plan("snapkv", {}, bad), InputError);
}

TEST(Registry, CompositionsTakeParametersPerComponent) {
  EXPECT_THROW(make_cache_plan("snapkv+", {}, Budget::parse("64")), InputError);
  EXPECT_THROW(make_cache_plan("snapkv+streamingllm", {}, Budget::parse("64")), InputError);
  EXPECT_THROW(make_cache_plan("full+snapkv", {{"window", 8}}, Budget::parse("64")), InputError);
}

TEST(Registry, EveryPolicyHasSummarySourceAndObjectDefaults) {
  for (const auto& info : list_policies()) {
    EXPECT_FALSE(info.summary.empty()) << info.name;
    EXPECT_FALSE(info.source.empty()) << info.name;
    EXPECT_TRUE(info.default_params.is_object()) << info.name;
    // the defaults themselves are accepted
    if (info.kind != PolicyKind::kKernelWalk) {
      EXPECT_NO_THROW(make_cache_plan(info.name, info.default_params, Budget::parse("64")))
          << info.name;
    }
  }
}

// Decode selectors are built by decode_selector_factory with the plan's budget itself, and report
// it (MagicPIG's sample count is data-dependent and says so).
TEST(Registry, DecodeSelectorsGetThePlanBudget) {
  int selectors = 0;
  for (const auto& info : list_policies()) {
    if (info.kind != PolicyKind::kDecodeSelection) continue;
    ++selectors;
    const CachePlan plan = make_cache_plan(info.name, {}, Budget::parse("10%"));
    ASSERT_TRUE(plan.selector) << info.name;
    EXPECT_EQ(plan.selector->name(), info.name);
    const nlohmann::json described =
        dynamic_cast<const DescribedDecodeSelector&>(*plan.selector).describe();
    EXPECT_EQ(described["budget"], info.name == "magicpig" ? "data-dependent" : "10%") << info.name;
    EXPECT_EQ(described["dense_layers"], info.default_params["dense_layers"]) << info.name;
    EXPECT_EQ(plan.budget->to_string(), "10%");
    EXPECT_THROW(make_cache_plan(info.name, {}, std::nullopt), InputError) << info.name;
  }
  EXPECT_EQ(selectors, 4);  // topk, quest, magicpig, binarypc
}

TEST(Params, IntegerAcceptsWholeFloatsAndListsAreChecked) {
  PolicyParams params("x", {{"window", 8.0}, {"dense_layers", {0, 1}}},
                      {{"window", 32}, {"dense_layers", nlohmann::json::array()}});
  EXPECT_EQ(params.integer("window"), 8);
  EXPECT_EQ(params.integers("dense_layers"), (std::vector<int>{0, 1}));
  EXPECT_THROW(PolicyParams("x", {{"window", 8.5}}, {{"window", 32}}), InputError);
  EXPECT_THROW(PolicyParams("x", nlohmann::json::array(), {{"window", 32}}), InputError);
}

}  // namespace
}  // namespace kvb
