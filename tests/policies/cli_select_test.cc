// kvbench select end to end: writes a small safetensors input, runs the binary, compares the kept
// positions with the policy called directly.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/safetensors.h"
#include "policies/registry.h"
#include "synthetic_prefill.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

test::CommandRun run(const std::string& command) { return test::run_command(command + " 2>&1"); }

std::filesystem::path write_inputs(const test::SyntheticPrefill& p, bool with_wo) {
  F32Tensors tensors;
  std::vector<float> q, k, v, wo;
  for (int l = 0; l < p.n_layers; ++l) {
    q.insert(q.end(), p.queries[l].begin(), p.queries[l].end());
    for (int h = 0; h < p.n_kv_heads; ++h) {
      k.insert(k.end(), p.keys[l][h].begin(), p.keys[l][h].end());
      v.insert(v.end(), p.values[l][h].begin(), p.values[l][h].end());
    }
    wo.insert(wo.end(), p.output_projection[l].begin(), p.output_projection[l].end());
  }
  tensors["q_window"] = {{p.n_layers, p.n_query_heads, p.window, p.head_dim}, q};
  tensors["k"] = {{p.n_layers, p.n_kv_heads, p.length, p.head_dim}, k};
  tensors["v"] = {{p.n_layers, p.n_kv_heads, p.length, p.head_dim}, v};
  const int in = p.n_query_heads * p.head_dim;
  if (with_wo) tensors["w_o"] = {{p.n_layers, in, in}, wo};
  const auto path =
      std::filesystem::temp_directory_path() /
      ("kvb_select_" + std::to_string(::getpid()) + (with_wo ? "_wo" : "") + ".safetensors");
  write_safetensors(path, tensors);
  return path;
}

TEST(CliSelect, PrintsTheKeptPositionsOfThePolicy) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  test::SyntheticPrefill prefill(2, 4, 2, 50, 8, 8, 71);
  const auto path = write_inputs(prefill, true);
  const std::string binary = test::kvbench_binary().string();
  for (const auto& [policy, params] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"dropkv", {}},
                                                           {"snapkv", {{"window", 8}}},
                                                           {"adakv", {{"window", 8}}},
                                                           {"criticalkv", {{"window", 4}}}}) {
    const test::CommandRun result =
        run(binary + " select --policy " + policy + " --budget 20 --params '" + params.dump() +
            "' --inputs " + path.string() + " --json");
    ASSERT_EQ(result.exit_code, 0) << policy << ": " << result.out;
    const auto printed = nlohmann::json::parse(result.out)["kept"].get<KeptIndices>();
    const CachePlan plan = make_cache_plan(policy, params, Budget::parse("20"));
    EXPECT_EQ(printed, plan.prefill->select(prefill.view, 20)) << policy;
  }
  std::filesystem::remove(path);
}

TEST(CliSelect, ClearErrorsForBadPolicyParametersBudgetsAndInputs) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  test::SyntheticPrefill prefill(1, 2, 1, 30, 8, 8, 73);
  const auto path = write_inputs(prefill, false);
  const std::string base = test::kvbench_binary().string() + " select --inputs " + path.string();
  auto expect_error = [&](const std::string& flags, const std::string& phrase) {
    const test::CommandRun result = run(base + " " + flags + " --json");
    EXPECT_EQ(result.exit_code, 2) << flags << ": " << result.out;
    EXPECT_NE(result.out.find(phrase), std::string::npos) << flags << ": " << result.out;
  };
  expect_error("--policy nosuch --budget 10", "unknown policy 'nosuch'");
  expect_error("--policy snapkv --budget 10 --params '{\"kernal\": 3}'",
               "unknown parameter 'kernal'");
  expect_error("--policy snapkv --budget 0", "must be > 0");
  expect_error("--policy snapkv --budget 31 --params '{\"window\": 8}'", "larger than the prompt");
  expect_error("--policy criticalkv --budget 10 --params '{\"window\": 8}'", "w_o");
  expect_error("--policy snapkv --budget 10", "window queries");  // default window 32 > 8
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvb
