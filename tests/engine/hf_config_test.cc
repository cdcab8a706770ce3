// config.json -> ModelConfig, checked on the published configs of the paper models (copied from
// their HF model cards: meta-llama/Llama-3.1-8B-Instruct, mistralai/Mistral-7B-Instruct-v0.3,
// Qwen/Qwen2.5-7B-Instruct, HuggingFaceTB/SmolLM2-135M-Instruct) against the presets and the GGUF.
#include "engine/hf_config.h"

#include <gtest/gtest.h>

#include "common/errors.h"
#include "engine/gguf.h"
#include "engine/presets.h"
#include "engine/weights_loader.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

const char* kLlama31 =
    R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
 "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096,
 "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
 "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
 "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
 "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
 "vocab_size": 128256})";

const char* kMistral03 =
    R"({"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
 "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
 "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
 "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
 "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
 "use_cache": true, "vocab_size": 32768})";

const char* kQwen25 =
    R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
 "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
 "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2",
 "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
 "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
 "use_cache": true, "use_sliding_window": false, "vocab_size": 152064})";

const char* kSmolLM2 =
    R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1,
 "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
 "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
 "num_key_value_heads": 3, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 100000,
 "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 49152})";

ModelConfig parse(const char* text) {
  return model_config_from_hf_json(nlohmann::json::parse(text), "config.json");
}

void expect_same_shapes(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.n_query_heads, b.n_query_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_dim, b.ffn_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_context, b.max_context);
  EXPECT_FLOAT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_FLOAT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.llama3_rope_scaling.has_value(), b.llama3_rope_scaling.has_value());
}

TEST(HfConfigTest, PaperModelConfigsMatchThePresets) {
  const ModelConfig llama = parse(kLlama31);
  expect_same_shapes(llama, preset_config("llama-3.1-8b"));
  ASSERT_TRUE(llama.llama3_rope_scaling);
  EXPECT_FLOAT_EQ(llama.llama3_rope_scaling->factor, 8.0f);
  EXPECT_FLOAT_EQ(llama.llama3_rope_scaling->low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(llama.llama3_rope_scaling->high_freq_factor, 4.0f);
  EXPECT_EQ(llama.llama3_rope_scaling->original_max_position, 8192);
  EXPECT_FALSE(llama.rope_interleaved_pairs);
  const ModelConfig mistral = parse(kMistral03);
  expect_same_shapes(mistral, preset_config("mistral-7b"));
  const ModelConfig qwen = parse(kQwen25);
  expect_same_shapes(qwen, preset_config("qwen2.5-7b"));
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_FALSE(qwen.dummy_weights);
}

TEST(HfConfigTest, SmolLM2ConfigMatchesItsGguf) {
  const ModelConfig hf = parse(kSmolLM2);
  EXPECT_TRUE(hf.tied_embeddings);
  EXPECT_EQ(hf.head_dim, 64);
  const auto path = test::default_model_path();
  KVB_REQUIRE_FILE(path);
  expect_same_shapes(hf, model_config_from_gguf(*GgufFile::open(path)));
}

TEST(HfConfigTest, DefaultsAndOptionalFields) {
  auto j = nlohmann::json::parse(kSmolLM2);
  j.erase("num_key_value_heads");
  j.erase("rope_theta");
  j.erase("tie_word_embeddings");
  j["head_dim"] = 32;
  j["attention_bias"] = true;
  const ModelConfig c = model_config_from_hf_json(j, "x");
  EXPECT_EQ(c.n_kv_heads, 9);  // multi-head attention when absent
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.tied_embeddings);  // LlamaConfig's default
  EXPECT_EQ(c.head_dim, 32);        // explicit head_dim wins over hidden/heads
  EXPECT_TRUE(c.qkv_bias);
  auto m = nlohmann::json::parse(kMistral03);
  m["sliding_window"] = 4096;  // Mistral v0.1
  EXPECT_EQ(model_config_from_hf_json(m, "x").max_context, 4096);
}

std::string error_of(nlohmann::json j) {
  try {
    model_config_from_hf_json(j, "cfg.json");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfigTest, ErrorsNameTheField) {
  auto j = nlohmann::json::parse(kLlama31);
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_NE(error_of(j).find("cfg.json: architecture 'GPT2LMHeadModel' is not supported"),
            std::string::npos);
  j = nlohmann::json::parse(kLlama31);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(error_of(j).find("rope_scaling type 'yarn'"), std::string::npos);
  j = nlohmann::json::parse(kLlama31);
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("'hidden_size' is missing"), std::string::npos);
  j = nlohmann::json::parse(kLlama31);
  j["num_attention_heads"] = "32";
  EXPECT_NE(error_of(j).find("'num_attention_heads' must be an integer"), std::string::npos);
  j = nlohmann::json::parse(kLlama31);
  j["num_key_value_heads"] = 5;
  EXPECT_NE(error_of(j).find("not a multiple"), std::string::npos);
  EXPECT_THROW(model_config_from_hf_json(
                   nlohmann::json::parse(R"({"architectures": ["Phi3ForCausalLM"]})"), "c"),
               InputError);
  EXPECT_THROW(model_config_from_hf_folder("/nonexistent-folder"), InputError);
}

}  // namespace
}  // namespace kvb
