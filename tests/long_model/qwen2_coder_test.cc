// The 32K-context real model, Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2: Q/K/V biases, NeoX RoPE
// with theta 1e6, untied q8_0 output, q5_0/q8_0/q4_K/q6_K weights, the qwen2 pre-tokenizer,
// ChatML). Needs `harness/scripts/get-model.sh qwen2.5-coder-0.5b` (skips without it); ctest label
// long-model:
//   cd build && ctest -L long-model --output-on-failure
// Truth: the gguf PyPI package's dequantiser (tests/goldens/dequantize_goldens.json) and the
// float64 NumPy forward pass (tests/goldens/qwen2.5-coder-0.5b_reference_logits.json, made by
// tests/goldens/make_reference_logits.py, one prompt of 2,984 tokens).
#include <nlohmann/json.hpp>
#include <tuple>

#include "tests/engine/dequantize_goldens.h"
#include "tests/engine/reference_logits.h"

namespace kvb {
namespace {

using Qwen2CoderModel = test::SharedModelTest<test::long_model_path>;

TEST_F(Qwen2CoderModel, ConfigTokenizerAndTemplate) {
  KVB_REQUIRE_LONG_MODEL();
  const ModelConfig& c = model_->weights->config;
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  // layers, d_model, query / KV heads, head_dim, ffn, vocabulary, context
  EXPECT_EQ(std::tie(c.n_layers, c.d_model, c.n_query_heads, c.n_kv_heads, c.head_dim, c.ffn_dim,
                     c.vocab_size, c.max_context),
            std::make_tuple(24, 896, 14, 2, 64, 4864, 151936, 32768));
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

// The engine on the q4_K/q5_0/q6_K/q8_0 blocks against the f32 reference mode (issue 22): 5% of
// the largest logit, as for SmolLM2 (tests/engine/reference_logits_test.cc).
TEST_F(Qwen2CoderModel, StoredBlocksStayCloseToTheF32Reference) {
  KVB_REQUIRE_LONG_MODEL();
  test::expect_stored_weights_close_to_f32(
      *model_, test::long_model_path(),
      test::source_dir() / "tests/goldens/qwen2.5-coder-0.5b_reference_logits.json", 0.05);
}

TEST_F(Qwen2CoderModel, LivePythonReferenceMatchesKvbenchLogits) {
  KVB_REQUIRE_LONG_MODEL();
  // "<|im_start|>user\nHi 12345<|im_end|>\n": special tokens, digits, a newline.
  test::expect_live_reference_matches_kvbench(test::long_model_path(),
                                              "151644,872,198,13048,220,16,17,18,19,20,151645,198");
}

// Greedy chat generation through the CLI: the ChatML prompt with Qwen's default system turn, and
// the stop at <|im_end|>.
TEST_F(Qwen2CoderModel, ChatGenerationAnswersAndStops) {
  KVB_REQUIRE_LONG_MODEL();
  KVB_REQUIRE_FILE(test::kvbench_binary());
  const auto result = nlohmann::json::parse(test::command_output(
      test::kvbench_binary().string() + " generate --model " + test::long_model_path().string() +
      " --chat --prompt 'What is the capital of France? Answer in one sentence.' --max-new-tokens "
      "40 --json"));
  const std::string text = result["text"];
  EXPECT_NE(text.find("Paris"), std::string::npos) << text;
  EXPECT_EQ(result["stop_reason"], "eos") << text;
  std::printf("[ generate  ] %d prompt tokens -> \"%s\" (prefill %.0f ms, TPOT %.1f ms)\n",
              result["prompt_tokens"].get<int>(), text.c_str(), result["prefill_ms"].get<double>(),
              result["tpot_ms"].get<double>());
}

}  // namespace
}  // namespace kvb
