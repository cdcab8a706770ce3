#include "harness/sweep/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/errors.h"
#include "harness/sweep/sweep.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

nlohmann::json minimal() {
  return nlohmann::json::parse(R"({
    "models": ["m.gguf"],
    "benchmarks": [{"benchmark": "ruler", "tasks": ["niah_single_1", "vt"], "lengths": [1024, 2048],
                    "samples": 3}],
    "policies": ["full", {"name": "snapkv", "params": {"window": 32}}, "dropkv"],
    "budgets": ["25%", 128]
  })");
}

// The error message must name the key path; returns it for further checks.
std::string error_of(const nlohmann::json& json) {
  try {
    parse_sweep_config(json, "sweep.json");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for " << json.dump();
  return "";
}

TEST(SweepConfig, ParsesAndCanonicalisesBudgets) {
  const SweepConfig config = parse_sweep_config(minimal(), "sweep.json");
  EXPECT_EQ(config.name, "sweep");
  ASSERT_EQ(config.policies.size(), 3u);
  ASSERT_EQ(config.policies[0].budgets.size(), 1u);
  EXPECT_FALSE(config.policies[0].budgets[0]);  // "full" takes no budget
  ASSERT_EQ(config.policies[1].budgets.size(), 2u);
  EXPECT_EQ(config.policies[1].budgets[0]->unit, Budget::Unit::kFraction);
  EXPECT_DOUBLE_EQ(config.policies[1].budgets[0]->value, 0.25);
  EXPECT_EQ(config.policies[1].budgets[1]->unit, Budget::Unit::kTokens);
  EXPECT_DOUBLE_EQ(config.policies[1].budgets[1]->value, 128);
  EXPECT_EQ(config.policies[1].params["window"], 32);
  EXPECT_EQ(config.prompt_modes, std::vector<PromptMode>{PromptMode::kQueryAware});
  EXPECT_EQ(config.benchmarks[0].seed, 42u);
}

TEST(SweepConfig, BothPromptModes) {
  auto json = minimal();
  json["prompt_mode"] = "both";
  const SweepConfig config = parse_sweep_config(json, "sweep.json");
  EXPECT_EQ(config.prompt_modes.size(), 2u);
}

TEST(SweepConfig, KvDtypeIsOptional) {
  EXPECT_FALSE(parse_sweep_config(minimal(), "sweep.json").kv_dtype.has_value());
  auto json = minimal();
  json["kv_dtype"] = "bf16";
  EXPECT_EQ(parse_sweep_config(json, "sweep.json").kv_dtype, KvDtype::kBf16);
  json["kv_dtype"] = "half";
  EXPECT_NE(error_of(json).find("kv_dtype"), std::string::npos);
  EXPECT_NE(error_of(json).find("f32, f16 or bf16"), std::string::npos);
}

TEST(SweepConfig, NumericsAreOptionalAndCannotRoundIntoAnF16Cache) {
  EXPECT_FALSE(parse_sweep_config(minimal(), "sweep.json").numerics.has_value());
  auto json = minimal();
  json["numerics"] = "bf16-device";
  EXPECT_EQ(parse_sweep_config(json, "sweep.json").numerics, ForwardPrecision::kBf16Device);
  json["kv_dtype"] = "f16";
  EXPECT_NE(error_of(json).find("round again"), std::string::npos) << error_of(json);
  json.erase("kv_dtype");
  json["numerics"] = "bf16";
  EXPECT_NE(error_of(json).find("f32 or bf16-device"), std::string::npos) << error_of(json);
}

TEST(SweepConfig, ErrorsNameTheKey) {
  auto json = minimal();
  json["benchmarks"][0]["lengths"][1] = -5;
  EXPECT_NE(error_of(json).find("benchmarks[0].lengths[1]"), std::string::npos);

  json = minimal();
  json["budgets"][1] = "0";
  EXPECT_NE(error_of(json).find("budgets[1]"), std::string::npos);

  json = minimal();
  json["benchmarks"][0]["benchmark"] = "rulerr";
  EXPECT_NE(error_of(json).find("benchmarks[0].benchmark"), std::string::npos);

  json = minimal();
  json["policies"][1]["budget"] = nlohmann::json::array({"10%"});  // typo for "budgets"
  EXPECT_NE(error_of(json).find("policies[1].budget"), std::string::npos);

  json = minimal();
  json.erase("budgets");
  EXPECT_NE(error_of(json).find("'budgets'"), std::string::npos);

  json = minimal();
  json["prompt_mode"] = "aware";
  EXPECT_NE(error_of(json).find("prompt_mode"), std::string::npos);

  json = minimal();
  json["models"] = nlohmann::json::array();
  EXPECT_NE(error_of(json).find("'models'"), std::string::npos);

  json = minimal();
  json["policies"][0] = {{"name", "full"}, {"budgets", {"10%"}}};
  EXPECT_NE(error_of(json).find("policies[0].budgets"), std::string::npos);

  json = minimal();
  json["benchmarks"][0]["depths"] = {50};
  EXPECT_NE(error_of(json).find("benchmarks[0].depths"), std::string::npos);

  json = minimal();
  json["benchmarks"][0]["template"] = "chat";  // niah only
  EXPECT_NE(error_of(json).find("benchmarks[0].template"), std::string::npos);

  json = minimal();
  json["benchmarks"][0] = {{"benchmark", "niah"}, {"lengths", {1024}}, {"template", "base"}};
  EXPECT_NE(error_of(json).find("must be \"raw\""), std::string::npos);

  json = minimal();
  json["samples"] = 3;
  EXPECT_NE(error_of(json).find("'samples'"), std::string::npos);
}

TEST(SweepConfig, FileErrors) {
  EXPECT_THROW(load_sweep_config("/nonexistent/sweep.json"), InputError);
  const auto path = std::filesystem::temp_directory_path() / "kvb_bad_config.json";
  std::ofstream(path) << "{ \"models\": [";
  EXPECT_THROW(load_sweep_config(path), FormatError);
  std::filesystem::remove(path);
}

// sweep_config_fuzz: a model path longer than the file system takes made std::filesystem::exists
// throw out of the parser (ENAMETOOLONG); such a path is one that does not exist, kept as given.
TEST(SweepConfig, PathsTheFileSystemRefusesAreKeptAsGiven) {
  nlohmann::json json = minimal();
  const std::string long_name = "models/" + std::string(5000, 'm') + ".gguf";
  json["models"] = {long_name};
  SweepConfig config;
  ASSERT_NO_THROW(config = parse_sweep_config(json, "sweep.json"));
  EXPECT_EQ(config.models.at(0).path, long_name);
}

TEST(SweepConfig, UnknownPolicyNamesTheKey) {
  const SweepConfig config = parse_sweep_config(minimal(), "sweep.json");
  EXPECT_NO_THROW(check_policy_names(config, {"full", "snapkv", "dropkv"}));
  try {
    check_policy_names(config, {"full", "snapkv"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policies[2]"), std::string::npos);
  }
  auto json = minimal();
  json["policies"][1] = "snapkv+art";
  EXPECT_NO_THROW(
      check_policy_names(parse_sweep_config(json, "s.json"), {"full", "snapkv", "art", "dropkv"}));
}

TEST(SweepConfig, ShippedConfigsParse) {
  for (const auto& name : {"demo.json", "ci.json"}) {
    const auto path = test::source_dir() / "configs" / name;
    KVB_REQUIRE_FILE(path);
    const SweepConfig config = load_sweep_config(path);
    EXPECT_FALSE(expand_groups(config).empty()) << name;
  }
  const auto paper = test::source_dir() / "configs" / "paper";
  if (!std::filesystem::exists(paper)) GTEST_SKIP() << "no configs/paper";
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(paper)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_NO_THROW(load_sweep_config(entry.path())) << entry.path();
    ++parsed;
  }
  EXPECT_GT(parsed, 0);
}

TEST(Sweep, ExpansionCountsAndStableKeys) {
  const SweepConfig config = parse_sweep_config(minimal(), "sweep.json");
  const auto groups = expand_groups(config);
  ASSERT_EQ(groups.size(), 4u);  // 2 tasks x 2 lengths
  // full (1) + snapkv (2 budgets) + dropkv (2 budgets)
  EXPECT_EQ(groups[0].cells.size(), 5u);
  EXPECT_EQ(groups[0].sample_count, 3);
  const Cell& cell = groups[0].cells[1];
  EXPECT_EQ(cell_from_json(nlohmann::json::parse(cell.key())).key(), cell.key());
  EXPECT_EQ(cell.policy_label(), "snapkv(window=32)");
}

TEST(Sweep, CellCarriesItsPlanSpec) {
  nlohmann::json json = minimal();
  json["dense_layers"] = {0, 3};
  json["policies"] = {"full",
                      "streamingllm",
                      "snapkv+art",
                      {{"name", "quest"}, {"params", {{"dense_layers", {1}}}}}};
  json["budgets"] = {"0.25"};
  const auto groups = expand_groups(parse_sweep_config(json, "sweep.json"));
  const std::vector<Cell>& cells = groups[0].cells;
  ASSERT_EQ(cells.size(), 4u);
  // full: no budget, and no dense_layers parameter to fill in.
  EXPECT_FALSE(cells[0].plan_spec().budget);
  EXPECT_EQ(cells[0].plan_spec().params, nlohmann::json::object());
  EXPECT_EQ(cells[0].budget_text(), "");
  // streamingllm has dense_layers: the sweep's layers fill it; "0.25" is the fraction 25%.
  const PlanSpec streaming = cells[1].plan_spec();
  EXPECT_EQ(streaming.params["dense_layers"], nlohmann::json({0, 3}));
  ASSERT_TRUE(streaming.budget);
  EXPECT_DOUBLE_EQ(streaming.budget->value, 0.25);
  EXPECT_EQ(cells[1].budget_text(), "25%");
  // A composition's params are per component: left as given.
  EXPECT_EQ(cells[2].plan_spec().params, nlohmann::json::object());
  // The config's own dense_layers win over the sweep's.
  EXPECT_EQ(cells[3].plan_spec().params["dense_layers"], nlohmann::json({1}));
  // The budget survives the database round trip through the key.
  const Cell reread = cell_from_json(nlohmann::json::parse(cells[1].key()));
  ASSERT_TRUE(reread.budget);
  EXPECT_DOUBLE_EQ(reread.budget->value, 0.25);
  EXPECT_FALSE(cell_from_json(nlohmann::json::parse(cells[0].key())).budget);
}

TEST(SweepConfig, SameBudgetWrittenTwoWaysRepeats) {
  nlohmann::json json = minimal();
  json["budgets"] = {"25%", 0.25};
  EXPECT_NE(error_of(json).find("budgets[1]': repeats budget 25%"), std::string::npos);
}

TEST(Sweep, ShardsPartitionTheUnits) {
  const SweepConfig config = parse_sweep_config(minimal(), "sweep.json");
  const auto all = plan_sweep(config, Shard{0, 1});
  EXPECT_EQ(all.units.size(), 12u);
  EXPECT_EQ(all.total_rows(), 60);
  std::set<std::pair<int, int>> seen;
  size_t total = 0;
  for (int i = 0; i < 5; ++i) {
    const auto plan = plan_sweep(config, Shard{i, 5});
    for (const auto& u : plan.units) EXPECT_TRUE(seen.insert({u.group, u.sample_index}).second);
    total += plan.units.size();
  }
  EXPECT_EQ(total, all.units.size());
  EXPECT_EQ(Shard::parse("2/4").index, 2);
  EXPECT_THROW(Shard::parse("4/4"), InputError);
  EXPECT_THROW(Shard::parse("x/4"), InputError);
  EXPECT_THROW(Shard::parse("1"), InputError);
}

}  // namespace
}  // namespace kvb
