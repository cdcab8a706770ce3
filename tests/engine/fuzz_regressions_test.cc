// Regression tests for the engine readers' bugs of issue 18: each says whether a fuzz target of
// tests/fuzz/ found it or a review of the reader it covers did (the target then reproduces it).
#include <gtest/gtest.h>

#include <fstream>

#include "common/errors.h"
#include "engine/chat_template.h"
#include "engine/hf_config.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return test::fresh_temp_dir("kvb_engine_fuzz_regressions_" + name);
}

std::string chat_error(const fs::path& dir) {
  try {
    chat_template_name_for_hf_folder(dir.string());
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";  // chosen, or failed with another type: both are the bug here
}

// Review, reproduced by chat_template_fuzz: fields of the wrong type in tokenizer_config.json or
// config.json made json::value() throw nlohmann's type_error out of
// chat_template_name_for_hf_folder.
TEST(FuzzRegressions, ChatTemplateFieldsOfTheWrongTypeAreFormatErrorsNamingTheFile) {
  const fs::path dir = fresh_dir("chat");
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [1]})";
  EXPECT_NE(chat_error(dir).find("tokenizer_config.json"), std::string::npos) << chat_error(dir);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "default", "template": 7}]})";
  EXPECT_NE(chat_error(dir).find("chat_template[0].template"), std::string::npos)
      << chat_error(dir);
  std::ofstream(dir / "tokenizer_config.json") << "{}";
  std::ofstream(dir / "config.json") << R"({"model_type": 5})";
  EXPECT_NE(chat_error(dir).find("config.json: model_type"), std::string::npos) << chat_error(dir);
  std::ofstream(dir / "config.json") << "[1, 2]";  // not an object: no fields
  EXPECT_EQ(chat_template_name_for_hf_folder(dir.string()), "plain");
  // The well-formed list form still picks its default entry.
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "x"},
                               {"name": "default", "template": "<|im_start|> You are Qwen"}]})";
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen2"})";
  EXPECT_EQ(chat_template_name_for_hf_folder(dir.string()), "chatml-qwen2");
}

// Review, reproduced by hf_config_fuzz's property check: a RoPE base <= 0, a negative norm epsilon
// or one beyond float's range (1e300 becomes inf) were accepted and made every logit NaN.
TEST(FuzzRegressions, HfConfigRejectsRopeAndNormValuesThatGiveNaN) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"vocab_size", 100}};
  EXPECT_NO_THROW(model_config_from_hf_json(j, "config.json"));
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"rope_theta", 0},
                                                           {"rope_theta", -10000.0},
                                                           {"rope_theta", 1e300},
                                                           {"rms_norm_eps", -1e-5},
                                                           {"rms_norm_eps", 1e300}}) {
    nlohmann::json bad = j;
    bad[field] = value;
    try {
      model_config_from_hf_json(bad, "config.json");
      ADD_FAILURE() << field << " = " << value.dump() << " was accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  nlohmann::json scaled = j;
  scaled["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", -1.0},
                            {"high_freq_factor", 4.0}};
  EXPECT_THROW(model_config_from_hf_json(scaled, "config.json"), FormatError);
  scaled["rope_scaling"]["low_freq_factor"] = 1.0;
  scaled["rope_scaling"]["high_freq_factor"] = 1e300;
  EXPECT_THROW(model_config_from_hf_json(scaled, "config.json"), FormatError);
  scaled["rope_scaling"]["high_freq_factor"] = 4.0;
  EXPECT_NO_THROW(model_config_from_hf_json(scaled, "config.json"));
}

}  // namespace
}  // namespace kvb
