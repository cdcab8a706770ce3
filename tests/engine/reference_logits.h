// Comparing CpuEngine's last-position logits with the independent NumPy reference
// (tests/engine/reference/numpy_forward.py: float64, the gguf package's reader and dequantiser).
// Criterion (issue 2): the same top-1 token, and every compared logit within 1e-3 of the largest
// reference logit's magnitude. The engine runs in the f32 reference mode (WeightFormat::kF32,
// `kvbench logits --weights f32`); the engine on the stored blocks is compared with that mode
// (expect_stored_weights_close_to_f32). Shared by reference_logits_test.cc (SmolLM2) and
// tests/long_model/.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/forward.h"
#include "engine/model.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace kvb::test {

inline double max_magnitude(const std::vector<double>& values) {
  double m = 0;
  for (double v : values) m = std::max(m, std::abs(v));
  return m;
}

inline int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The command's standard output; a test failure when it exits with an error.
inline std::string command_output(const std::string& command) {
  const CommandRun run = run_command(command);
  if (run.exit_code != 0) ADD_FAILURE() << "command failed (" << run.exit_code << "): " << command;
  return run.out;
}

// A fixture whose test suite loads the model at Path() once, in the f32 reference mode; null when
// the file is absent (the tests check for it and skip first).
template <std::filesystem::path (*Path)()>
class SharedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(Path()))
      model_ = std::make_unique<LoadedModel>(
          load_model(Path().string(), {.weight_format = WeightFormat::kF32}));
  }
  static void TearDownTestSuite() { model_.reset(); }
  static inline std::unique_ptr<LoadedModel> model_;
};

inline std::vector<float> cpu_engine_logits(const LoadedModel& model,
                                            const std::vector<TokenId>& ids) {
  CpuEngine engine(*model.weights);
  KvStore store = engine.make_store();
  return engine.forward_chunk(ids, store, CaptureRequest{}, nullptr, 0);
}

// Every prompt of a golden file made by tests/goldens/make_reference_logits.py: its top-20 and
// every stride-th reference logit against the engine's. Prints one line per prompt.
inline void expect_golden_prompts_match(const LoadedModel& model,
                                        const std::filesystem::path& golden_path,
                                        size_t min_prompts) {
  std::ifstream file(golden_path);
  const nlohmann::json golden = nlohmann::json::parse(file);
  const int stride = golden["stride"];
  ASSERT_GE(golden["prompts"].size(), min_prompts);
  for (const auto& prompt : golden["prompts"]) {
    SCOPED_TRACE(prompt["text"].get<std::string>().substr(0, 80));
    const std::vector<TokenId> ids = prompt["ids"];
    const std::vector<float> ours = cpu_engine_logits(model, ids);
    std::vector<std::pair<int, double>> reference;
    for (const auto& entry : prompt["top"]) reference.emplace_back(entry[0], entry[1]);
    const std::vector<double> strided = prompt["strided"];
    for (size_t i = 0; i < strided.size(); ++i)
      reference.emplace_back(static_cast<int>(i) * stride, strided[i]);
    std::vector<double> magnitudes;
    for (const auto& [id, value] : reference) magnitudes.push_back(value);
    const double largest = max_magnitude(magnitudes), tolerance = 1e-3 * largest;
    const int top1 = prompt["top"][0][0];
    EXPECT_EQ(argmax(ours), top1);
    double worst = 0;
    for (const auto& [id, value] : reference) {
      EXPECT_NEAR(ours[id], value, tolerance) << "token " << id;
      worst = std::max(worst, std::abs(ours[id] - value));
    }
    std::printf(
        "[ reference ] %zu tokens: top-1 %d %s, max |diff| %.2e = %.2e of the largest logit "
        "(tolerance %.2e)\n",
        ids.size(), argmax(ours), argmax(ours) == top1 ? "equal" : "DIFFERENT", worst,
        worst / largest, tolerance);
  }
}

// `ids` through numpy_forward.py now (skips without tests/.venv) and through `kvbench logits`; all
// logits compared.
inline void expect_live_reference_matches_kvbench(const std::filesystem::path& model,
                                                  const std::string& ids) {
  const std::filesystem::path python = source_dir() / "tests/.venv/bin/python";
  if (!std::filesystem::exists(python))
    GTEST_SKIP() << "missing " << python
                 << " (harness/scripts/setup.sh creates it with gguf+numpy)";
  KVB_REQUIRE_FILE(kvbench_binary());
  const std::filesystem::path script = source_dir() / "tests/engine/reference/numpy_forward.py";
  const nlohmann::json reference =
      nlohmann::json::parse(command_output(python.string() + " " + script.string() + " --model " +
                                           model.string() + " --ids " + ids + " --all"));
  const nlohmann::json ours = nlohmann::json::parse(
      command_output(kvbench_binary().string() + " logits --weights f32 --model " + model.string() +
                     " --ids " + ids + " --top-k 1 --all --json"));
  const std::vector<double> expected = reference["logits"];
  const std::vector<float> actual = ours["logits"];
  ASSERT_EQ(actual.size(), expected.size());
  const double largest = max_magnitude(expected), tolerance = 1e-3 * largest;
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, std::abs(actual[i] - expected[i]));
  EXPECT_LE(worst, tolerance);
  EXPECT_EQ(ours["top"][0]["id"].get<int>(), reference["top"][0][0].get<int>());
  std::printf(
      "[ reference ] live: max |diff| over %zu logits %.2e = %.2e of the largest logit (tolerance "
      "%.2e)\n",
      expected.size(), worst, worst / largest, tolerance);
}

// The last position's logits with every token but the last prefilled (GEMM on dequantised tiles)
// and the last one decoded (matrix-vector products on the blocks with q8 activations).
inline std::vector<float> prefill_then_decode_logits(const LoadedModel& model,
                                                     const std::vector<TokenId>& ids) {
  CpuEngine engine(*model.weights);
  KvStore store = engine.make_store();
  const int n = static_cast<int>(ids.size());
  engine.forward_chunk(std::span(ids).first(n - 1), store, CaptureRequest{}, nullptr, 0);
  CachePlan plan;
  return engine.decode_step(ids.back(), n - 1, 0, store, plan);
}

// The engine on the stored blocks against the f32 reference mode on every prompt of a golden file
// (prefill of all but the last token, then one decode step): every logit within `tolerance` of the
// largest f32 logit's magnitude (relative), and the same top-1 token where the f32 margin between
// its first two logits exceeds twice that.
inline void expect_stored_weights_close_to_f32(const LoadedModel& f32_model,
                                               const std::filesystem::path& model_path,
                                               const std::filesystem::path& golden_path,
                                               double tolerance) {
  const LoadedModel stored = load_model(model_path.string());
  ASSERT_FALSE(stored.weights->layers[0].w_gate.is_f32());
  std::ifstream file(golden_path);
  const nlohmann::json golden = nlohmann::json::parse(file);
  for (const auto& prompt : golden["prompts"]) {
    const std::vector<TokenId> ids = prompt["ids"];
    const std::vector<float> reference = cpu_engine_logits(f32_model, ids);
    const std::vector<float> ours = prefill_then_decode_logits(stored, ids);
    ASSERT_EQ(ours.size(), reference.size());
    double largest = 0, worst = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      largest = std::max(largest, std::abs(double(reference[i])));
      worst = std::max(worst, std::abs(double(ours[i]) - reference[i]));
    }
    EXPECT_LE(worst, tolerance * largest) << ids.size() << " tokens";
    std::vector<float> sorted = reference;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 2 * tolerance * largest) {
      EXPECT_EQ(argmax(ours), argmax(reference));
    }
    std::printf(
        "[ stored    ] %zu tokens: top-1 %s, max |diff| %.3e = %.3e of the largest logit "
        "(tolerance %.1e)\n",
        ids.size(), argmax(ours) == argmax(reference) ? "equal" : "DIFFERENT", worst,
        worst / largest, tolerance);
  }
}

}  // namespace kvb::test
