// The 32K-context real model, Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2: Q/K/V biases, NeoX RoPE
// with theta 1e6, untied q8_0 output, q5_0/q8_0/q4_K/q6_K weights, the qwen2 pre-tokenizer,
// ChatML). Needs `harness/scripts/get-model.sh qwen2.5-coder-0.5b` (skips without it); ctest label
// long-model:
//   cd build && ctest -L long-model --output-on-failure
// Truth: the gguf PyPI package's dequantiser (tests/goldens/dequantize_goldens.json) and the
// float64 NumPy forward pass (tests/goldens/qwen2.5-coder-0.5b_reference_logits.json, made by
// tests/goldens/make_reference_logits.py, one prompt of 2,984 tokens).
#include <nlohmann/json.hpp>

#include "engine/chat_template.h"
#include "tests/engine/dequantize_goldens.h"
#include "tests/engine/reference_logits.h"

namespace kvb {
namespace {

class Qwen2CoderModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(test::long_model_path()))
      model_ = new LoadedModel(load_model(test::long_model_path().string()));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static LoadedModel* model_;
};
LoadedModel* Qwen2CoderModel::model_ = nullptr;

TEST_F(Qwen2CoderModel, ConfigTokenizerAndTemplate) {
  KVB_REQUIRE_LONG_MODEL();
  const ModelConfig& c = model_->weights->config;
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.n_layers, 24);
  EXPECT_EQ(c.d_model, 896);
  EXPECT_EQ(c.n_query_heads, 14);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_dim, 4864);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_context, 32768);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FALSE(c.rope_interleaved_pairs);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(model_->weights->weight_dtypes,
            "q5_0 x 133, f32 x 121, q8_0 x 13, q4_K x 12, q6_K x 12");
  EXPECT_EQ(model_->tokenizer->kind(), "bpe:qwen2");
  EXPECT_EQ(model_->chat_template, "chatml-qwen2");
  const auto ids = model_->tokenizer->encode("<|im_start|>user\nHi 12345<|im_end|>", false, true);
  EXPECT_EQ(ids, (std::vector<TokenId>{151644, 872, 198, 13048, 220, 16, 17, 18, 19, 20, 151645}));
  EXPECT_TRUE(model_->tokenizer->is_end_of_generation(151645));  // <|im_end|>
}

TEST_F(Qwen2CoderModel, TensorsMatchTheGgufPackage) {
  KVB_REQUIRE_LONG_MODEL();
  test::expect_tensor_samples_match(test::long_model_path(),
                                    test::load_dequantize_goldens()["long_model_samples"]);
}

TEST_F(Qwen2CoderModel, GoldenPromptsMatchNumpyReference) {
  KVB_REQUIRE_LONG_MODEL();
  test::expect_golden_prompts_match(
      *model_, test::source_dir() / "tests/goldens/qwen2.5-coder-0.5b_reference_logits.json", 4);
}

TEST_F(Qwen2CoderModel, LivePythonReferenceMatchesKvbenchLogits) {
  KVB_REQUIRE_LONG_MODEL();
  // "<|im_start|>user\nHi 12345<|im_end|>\n": special tokens, digits, a newline.
  test::expect_live_reference_matches_kvbench(test::long_model_path(),
                                              "151644,872,198,13048,220,16,17,18,19,20,151645,198");
}

}  // namespace
}  // namespace kvb
