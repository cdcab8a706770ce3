// SmolLM2-135M-Instruct (Q4_1 GGUF) logits against an independent reference: a float64 NumPy
// forward pass over the `gguf` package's reader and dequantiser (tests/engine/reference/
// numpy_forward.py). Criterion (issue 2): same top-1 token, and every compared logit within 1e-3
// of the largest logit's magnitude.
//   Golden: four prompts precomputed into tests/goldens/smollm2_reference_logits.json (made by
//           tests/goldens/make_reference_logits.py), compared in-process with CpuEngine.
//   Live:   one short prompt through the Python reference now (skips without tests/.venv) and
//           through the `kvbench logits` binary, all 49,152 logits compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/cpu/forward.h"
#include "engine/model.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

double max_magnitude(const std::vector<double>& values) {
  double m = 0;
  for (double v : values) m = std::max(m, std::abs(v));
  return m;
}

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::string run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) ADD_FAILURE() << "command failed (" << status << "): " << command;
  return output;
}

class SmolLm2Reference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (fs::exists(test::default_model_path()))
      model_ = new LoadedModel(load_model(test::default_model_path().string()));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  std::vector<float> engine_logits(const std::vector<TokenId>& ids) const {
    CpuEngine engine(*model_->weights);
    KvStore store = engine.make_store();
    return engine.forward_chunk(ids, store, CaptureRequest{}, nullptr, 0);
  }
  static LoadedModel* model_;
};
LoadedModel* SmolLm2Reference::model_ = nullptr;

TEST_F(SmolLm2Reference, GoldenPromptsMatchNumpyReference) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const fs::path golden_path = test::source_dir() / "tests/goldens/smollm2_reference_logits.json";
  KVB_REQUIRE_FILE(golden_path);
  std::ifstream file(golden_path);
  const nlohmann::json golden = nlohmann::json::parse(file);
  const int stride = golden["stride"];
  ASSERT_GE(golden["prompts"].size(), 3u);
  for (const auto& prompt : golden["prompts"]) {
    SCOPED_TRACE(prompt["text"].get<std::string>());
    const std::vector<TokenId> ids = prompt["ids"];
    const std::vector<float> ours = engine_logits(ids);
    std::vector<std::pair<int, double>> reference;
    for (const auto& entry : prompt["top"]) reference.emplace_back(entry[0], entry[1]);
    const std::vector<double> strided = prompt["strided"];
    for (size_t i = 0; i < strided.size(); ++i)
      reference.emplace_back(static_cast<int>(i) * stride, strided[i]);
    std::vector<double> magnitudes;
    for (const auto& [id, value] : reference) magnitudes.push_back(value);
    const double tolerance = 1e-3 * max_magnitude(magnitudes);
    EXPECT_EQ(argmax(ours), prompt["top"][0][0].get<int>());
    double worst = 0;
    for (const auto& [id, value] : reference) {
      EXPECT_NEAR(ours[id], value, tolerance) << "token " << id;
      worst = std::max(worst, std::abs(ours[id] - value));
    }
    std::printf("[ reference ] %zu tokens: max |diff| %.2e (tolerance %.2e)\n", ids.size(), worst,
                tolerance);
  }
}

TEST_F(SmolLm2Reference, LivePythonReferenceMatchesKvbenchLogits) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const fs::path python = test::source_dir() / "tests/.venv/bin/python";
  if (!fs::exists(python))
    GTEST_SKIP() << "missing " << python << " (harness/scripts/setup.sh creates it with gguf+numpy)";
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const std::string model = test::default_model_path().string();
  const std::string ids = "1,504,3458,282,4649,314,253,1";  // a short arbitrary id sequence
  const fs::path script = test::source_dir() / "tests/engine/reference/numpy_forward.py";
  const nlohmann::json reference = nlohmann::json::parse(run_command(
      python.string() + " " + script.string() + " --model " + model + " --ids " + ids + " --all"));
  const nlohmann::json ours = nlohmann::json::parse(run_command(
      test::kvbench_binary().string() + " logits --model " + model + " --ids " + ids +
      " --top-k 1 --all --json"));
  const std::vector<double> expected = reference["logits"];
  const std::vector<float> actual = ours["logits"];
  ASSERT_EQ(actual.size(), expected.size());
  const double tolerance = 1e-3 * max_magnitude(expected);
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::abs(actual[i] - expected[i]));
  EXPECT_LE(worst, tolerance);
  EXPECT_EQ(ours["top"][0]["id"].get<int>(), reference["top"][0][0].get<int>());
  std::printf("[ reference ] live: max |diff| over %zu logits %.2e (tolerance %.2e)\n",
              expected.size(), worst, tolerance);
}

}  // namespace
}  // namespace kvb
