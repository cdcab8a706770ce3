// `kvbench logits`, `generate` and `bench` as a user runs them: JSON fields, agreement with the
// engine called in-process, and clear errors (exit codes of harness/commands/main.cc) for bad
// input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/forward.h"
#include "engine/model.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

using CliRun = test::CommandRun;  // out: stdout and stderr

CliRun kvbench(const std::string& arguments) {
  return test::run_command(test::kvbench_binary().string() + " " + arguments + " 2>&1");
}

TEST(CliLogits, PresetLogitsEqualTheEngineInProcess) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run =
      kvbench("logits --model preset:tiny-llama --ids 5,17,99,3 --top-k 3 --all --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto json = nlohmann::json::parse(run.out);
  const LoadedModel model = load_model("preset:tiny-llama");
  CpuEngine engine(*model.weights);
  KvStore store = engine.make_store();
  const std::vector<TokenId> ids = {5, 17, 99, 3};
  const auto logits = engine.forward_chunk(ids, store, CaptureRequest{}, nullptr, 0);
  const std::vector<float> printed = json["logits"];
  ASSERT_EQ(printed.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_FLOAT_EQ(printed[i], logits[i]);
  ASSERT_EQ(json["top"].size(), 3u);
  EXPECT_GE(json["top"][0]["logit"].get<double>(), json["top"][1]["logit"].get<double>());
}

// --numerics bf16-device prints the CPU forward at the GPU's rounding points over a bf16 cache.
TEST(CliLogits, DeviceNumericsAreTheDeviceForwardInProcess) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run = kvbench(
      "logits --model preset:tiny-llama --ids 5,17,99,3 --all --json --numerics bf16-device");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const std::vector<float> printed = nlohmann::json::parse(run.out)["logits"];
  const LoadedModel model = load_model("preset:tiny-llama");
  const std::vector<TokenId> ids = {5, 17, 99, 3};
  auto logits = [&](ForwardPrecision precision, KvDtype kv_dtype) {
    CpuEngine engine(*model.weights, kv_dtype, precision);
    KvStore store = engine.make_store();
    return engine.forward_chunk(ids, store, CaptureRequest{}, nullptr, 0);
  };
  const auto device = logits(ForwardPrecision::kBf16Device, KvDtype::kBf16);
  ASSERT_EQ(printed.size(), device.size());
  for (size_t i = 0; i < device.size(); ++i) EXPECT_FLOAT_EQ(printed[i], device[i]);
  EXPECT_NE(device, logits(ForwardPrecision::kF32, KvDtype::kF32));
}

TEST(CliLogits, BadIdsAreInputErrors) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  CliRun run = kvbench("logits --model preset:tiny-llama --ids 1,x,3");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("'x'"), std::string::npos) << run.out;
  run = kvbench("logits --model preset:tiny-llama --ids 1,256");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("256"), std::string::npos) << run.out;
}

TEST(CliLogits, PromptLongerThanTheContextIsCapacityError) {
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::kvbench_binary());
  std::string ids = "1";
  for (int i = 1; i < 8193; ++i) ids += ",1";
  const CliRun run =
      kvbench("logits --model " + test::default_model_path().string() + " --ids " + ids);
  EXPECT_EQ(run.exit_code, 4) << run.out;
  EXPECT_NE(run.out.find("8193"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("8192"), std::string::npos) << run.out;
}

TEST(CliBench, PresetReportsRatesAndBuild) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run = kvbench("bench --preset tiny-llama --context 64 --decode-tokens 4 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_FALSE(json["build_type"].get<std::string>().empty());
  EXPECT_GE(json["threads"].get<int>(), 1);
  ASSERT_EQ(json["prefill"].size(), 1u);
  EXPECT_EQ(json["prefill"][0]["tokens"], 64);
  EXPECT_GT(json["prefill"][0]["tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(json["decode"]["tokens"], 4);
  EXPECT_GT(json["decode"]["tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(json["dummy_weights"].get<bool>());
}

TEST(CliBench, NeedsExactlyOneModel) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  EXPECT_EQ(kvbench("bench").exit_code, 2);
  EXPECT_EQ(kvbench("bench --preset tiny-llama --model x.gguf").exit_code, 2);
}

// Checked before anything touches the GPU, so it runs (and names the option) on a machine without
// one.
TEST(CliBench, GpuPrefillChunkMustBePositive) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run = kvbench("bench --device cuda --preset llama-3.1-8b --dummy --prefill-chunk 0");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  if (run.out.find("without CUDA") == std::string::npos)  // a CUDA build names the bad option
    EXPECT_NE(run.out.find("--prefill-chunk must be >= 1"), std::string::npos) << run.out;
}

// A GPU policy list takes Full and the decode selectors only; anything else is named, with the fix,
// before the GPU is touched.
TEST(CliBench, GpuPolicyListNamesThePolicyItCannotHold) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run =
      kvbench("bench --device cuda --preset llama-3.1-8b --dummy --policy full,full+art");
  EXPECT_EQ(run.exit_code, 2) << run.out;
  if (run.out.find("without CUDA") == std::string::npos) {
    EXPECT_NE(run.out.find("'full+art' is neither"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("run it with its own --policy"), std::string::npos) << run.out;
  }
}

// The GPU bench builds the sweep's plan from --policy: what has no device form is named, with the
// fix, before the GPU is touched.
TEST(CliBench, GpuRefusesPlansWithoutDeviceFormByName) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"h2o_decode+art --budget 5%", "'h2o_decode+art' evicts during decode"},
      {"full,tova+art --budget 5%", "'tova+art' evicts during decode"}};
  for (const auto& [policy, message] : refused) {
    const CliRun run =
        kvbench("bench --device cuda --preset llama-3.1-8b --dummy --policy " + policy);
    EXPECT_EQ(run.exit_code, 2) << policy << ": " << run.out;
    if (run.out.find("without CUDA") == std::string::npos) {
      EXPECT_NE(run.out.find(message), std::string::npos) << run.out;
      EXPECT_NE(run.out.find("--device cpu"), std::string::npos) << run.out;
    }
  }
}

// MagicPIG has a device form (LSH sampling): the plan is accepted; without a GPU the bench stops
// at the device, with one it times MagicPIG beside Full on a short cache.
TEST(CliBench, GpuTakesMagicPig) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run = kvbench(
      "bench --device cuda --preset llama-3.1-8b --dummy --context 512 --policy full,magicpig "
      "--decode-tokens 2 --json");
  EXPECT_EQ(run.out.find("no device form"), std::string::npos) << run.out;
  if (run.out.find("without CUDA") != std::string::npos ||
      run.out.find("no CUDA device") != std::string::npos) {
    EXPECT_EQ(run.exit_code, 2) << run.out;
    return;
  }
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("\"magicpig\""), std::string::npos) << run.out;
}

// One set of flags on both devices: the CPU takes a list of contexts, and names the flags only the
// GPU measures.
TEST(CliBench, CpuTakesTheSameFlagsAndNamesTheGpuOnlyOnes) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run =
      kvbench("bench --device cpu --preset tiny-llama --context 32,64 --decode-tokens 4 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto json = nlohmann::json::parse(run.out);
  ASSERT_EQ(json["prefill"].size(), 2u);
  EXPECT_EQ(json["prefill"][1]["tokens"], 64);
  EXPECT_EQ(json["decode"]["context"], 32);
  for (const std::string flag : {"--max-batch", "--no-graphs", "--prefill-chunk 512"}) {
    const CliRun refused = kvbench("bench --device cpu --preset tiny-llama " + flag);
    EXPECT_EQ(refused.exit_code, 2) << flag;
    EXPECT_NE(refused.out.find(flag.substr(0, flag.find(' ')) + " is measured on the CUDA engine"),
              std::string::npos)
        << refused.out;
  }
  const CliRun list = kvbench("bench --device cpu --preset tiny-llama --policy full,quest");
  EXPECT_EQ(list.exit_code, 2) << list.out;
  EXPECT_NE(list.out.find("timed on the GPU only"), std::string::npos) << list.out;
}

// The CPU engine's own options belong to the same flag set; the GPU names them before it is
// touched.
TEST(CliBench, CpuOptionsAreInTheFlagSetAndTheGpuNamesThem) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run = kvbench(
      "bench --device cpu --preset tiny-llama --context 32 --decode-tokens 4 --threads 1 "
      "--weights f32 --no-ceilings --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["threads"], 1);
  EXPECT_EQ(json["measured_read_gbps"], 0.0);  // --no-ceilings
  for (const std::string flag :
       {"--threads 2", "--weights f32", "--kv-dtype f16", "--numerics f32", "--no-ceilings"}) {
    const CliRun refused = kvbench("bench --device cuda --preset llama-3.1-8b --dummy " + flag);
    EXPECT_EQ(refused.exit_code, 2) << flag << ": " << refused.out;
    if (refused.out.find("without CUDA") == std::string::npos)
      EXPECT_NE(refused.out.find(flag.substr(0, flag.find(' ')) + " is an option of the CPU"),
                std::string::npos)
          << refused.out;
  }
}

TEST(CliGenerate, SmolLm2AnswersParis) {
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const CliRun run = kvbench("generate --model " + test::default_model_path().string() +
                             " --chat --prompt 'What is the capital of France? Answer in one word.'"
                             " --max-new-tokens 16 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_NE(json["text"].get<std::string>().find("Paris"), std::string::npos) << run.out;
  EXPECT_EQ(json["stop_reason"], "eos");  // <|im_end|> ends the answer
  EXPECT_GT(json["ttft_ms"].get<double>(), 0);
}

// About 930 tokens of a Paul Graham essay with one invented fact in the middle, then the question:
// with the KV cache in each element type, each holding what it says.
TEST(CliGenerate, SmolLm2FindsAFactInTheMiddleOfALongPromptWithEachKvDtype) {
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const auto essay = test::fixture("haystack/pg_essays/addiction.txt");
  KVB_REQUIRE_FILE(essay);
  std::ifstream in(essay);
  std::vector<std::string> words;
  for (std::string word; in >> word && words.size() < 700;) words.push_back(word);
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) {
    text += (i ? " " : "") + words[i];
    if (i == 350) text += " The secret password for the museum vault is \"blue falcon\".";
  }
  text += "\n\nWhat is the secret password for the museum vault? Answer with the password only.";
  const auto prompt_file = std::filesystem::temp_directory_path() / "kvb_cli_forward_fact.txt";
  std::ofstream(prompt_file) << text;
  int64_t f32_bytes = 0;
  for (const std::string dtype : {"f32", "f16", "bf16"}) {
    const CliRun run = kvbench("generate --model " + test::default_model_path().string() +
                               " --chat --prompt-file " + prompt_file.string() +
                               " --max-new-tokens 16 --json --kv-dtype " + dtype);
    ASSERT_EQ(run.exit_code, 0) << dtype << ": " << run.out;
    const auto json = nlohmann::json::parse(run.out);
    EXPECT_GE(json["prompt_tokens"].get<int>(), 850);
    EXPECT_LE(json["prompt_tokens"].get<int>(), 1150);
    EXPECT_NE(json["text"].get<std::string>().find("blue falcon"), std::string::npos)
        << dtype << ": " << run.out;
    const int64_t bytes = json["kv_bytes"].get<int64_t>();
    if (dtype == "f32") f32_bytes = bytes;
    EXPECT_EQ(bytes, dtype == "f32" ? f32_bytes : f32_bytes / 2) << dtype;
  }
  std::filesystem::remove(prompt_file);
}

TEST(CliGenerate, BadFlagsAreInputErrors) {
  KVB_REQUIRE_FILE(test::kvbench_binary());
  EXPECT_EQ(kvbench("generate --model preset:tiny-llama --prompt hi --max-new-tokens 0").exit_code,
            2);
  EXPECT_EQ(kvbench("generate --model preset:tiny-llama --prompt hi --policy nosuch").exit_code, 2);
  EXPECT_EQ(kvbench("generate --model preset:tiny-llama --prompt-file /nonexistent").exit_code, 2);
  const CliRun dtype = kvbench("generate --model preset:tiny-llama --prompt hi --kv-dtype fp8");
  EXPECT_EQ(dtype.exit_code, 2);
  EXPECT_NE(dtype.out.find("--kv-dtype 'fp8' is not one of f32, f16 or bf16"), std::string::npos)
      << dtype.out;
  const CliRun numerics = kvbench("generate --model preset:tiny-llama --prompt hi --numerics bf16");
  EXPECT_EQ(numerics.exit_code, 2);
  EXPECT_NE(numerics.out.find("--numerics 'bf16' is not one of f32 or bf16-device"),
            std::string::npos)
      << numerics.out;
  const CliRun refused = kvbench(
      "generate --model preset:tiny-llama --prompt hi --numerics bf16-device --kv-dtype f16");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.out.find("round again"), std::string::npos) << refused.out;
  const CliRun run = kvbench(
      "generate --model preset:tiny-llama --prompt 'hello there' "
      "--max-new-tokens 3 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const int tokens = nlohmann::json::parse(run.out)["output_tokens"];
  EXPECT_GE(tokens, 1);
  EXPECT_LE(tokens, 3);
}

}  // namespace
}  // namespace kvb
