// GGUF -> ModelWeights: config from metadata, tensor mapping, RoPE row order, errors; presets.
#include "engine/weights_loader.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/errors.h"
#include "engine/model.h"
#include "engine/presets.h"
#include "tests/engine/tiny_gguf.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

using test::tiny_gguf;
using test::tiny_value;
using test::TinyGgufOptions;

// llama.cpp's converter: w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2).reshape(w.shape), written
// here as an explicit index map: converted row (h, i, j) at h*hd + 2i + j <- HF row h*hd + j*hd/2 + i.
std::vector<float> llama_cpp_permute(const std::vector<float>& hf, int n_heads, int hd, int in) {
  std::vector<float> out(hf.size());
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < hd / 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int c = 0; c < in; ++c)
          out[(size_t(h) * hd + 2 * i + j) * in + c] = hf[(size_t(h) * hd + j * (hd / 2) + i) * in + c];
  return out;
}

TEST(WeightsLoaderTest, UnpermuteInvertsTheLlamaCppPermutation) {
  const int heads = 3, hd = 8, in = 5;
  std::vector<float> hf(heads * hd * in);
  for (size_t i = 0; i < hf.size(); ++i) hf[i] = static_cast<float>(i);
  auto rows = llama_cpp_permute(hf, heads, hd, in);
  ASSERT_NE(rows, hf);
  unpermute_rope_rows(rows, heads, hd, in);
  EXPECT_EQ(rows, hf);
  std::vector<float> bias = {0, 1, 2, 3, 4, 5, 6, 7};
  auto permuted_bias = llama_cpp_permute(bias, 1, 8, 1);
  EXPECT_EQ(permuted_bias, (std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7}));
  unpermute_rope_rows(permuted_bias, 1, 8, 1);
  EXPECT_EQ(permuted_bias, bias);
}

TinyGgufOptions options(std::string arch, bool tied, bool bias, std::string skip = "", std::string bad = "") {
  TinyGgufOptions o;
  o.architecture = std::move(arch);
  o.tied = tied;
  o.qkv_bias = bias;
  o.skip_tensor = std::move(skip);
  o.bad_shape_tensor = std::move(bad);
  return o;
}

std::shared_ptr<ModelWeights> load_tiny(const TinyGgufOptions& o, std::vector<uint8_t>* keep) {
  *keep = tiny_gguf(o).bytes();
  const auto gguf = GgufFile::parse(*keep, "tiny.gguf");
  return load_weights_from_gguf(*gguf);
}

TEST(WeightsLoaderTest, MapsEveryTensorOfATinyLlama) {
  std::vector<uint8_t> bytes;
  const auto w = load_tiny({}, &bytes);
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.d_model, 8);
  EXPECT_EQ(c.n_query_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.ffn_dim, 16);
  EXPECT_EQ(c.vocab_size, 10);
  EXPECT_EQ(c.max_context, 128);
  EXPECT_FLOAT_EQ(c.rope_theta, 5000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.name, "tiny");
  EXPECT_TRUE(w->output.empty());
  EXPECT_EQ(&w->output_matrix(), &w->token_embedding);
  // Tensor ids in tiny_gguf order: 1 token_embd, 2 output_norm, then 9 per layer.
  ASSERT_EQ(w->token_embedding.size(), 80u);
  EXPECT_FLOAT_EQ(w->token_embedding[8 * 3 + 2], tiny_value(1, 26));  // [vocab, d]: row 3, col 2
  const LayerWeights& l1 = w->layers[1];
  const int base = 2 + 9;  // layer 1's first id minus one (9 tensors per layer)
  EXPECT_FLOAT_EQ(l1.attn_norm[5], tiny_value(base + 1, 5));
  EXPECT_FLOAT_EQ(l1.wv[4 * 8 - 1], tiny_value(base + 4, 31));
  EXPECT_FLOAT_EQ(l1.wo[9], tiny_value(base + 5, 9));
  EXPECT_FLOAT_EQ(l1.w_down[16 * 8 - 1], tiny_value(base + 9, 127));
  EXPECT_EQ(l1.w_down.size(), 128u);
  // Q: GGUF head 1 row 2i+j holds HF row j*2+i (head_dim 4): GGUF row 1 (i=0,j=1) is HF row 2.
  EXPECT_FLOAT_EQ(l1.wq[(4 + 2) * 8 + 0], tiny_value(base + 2, (4 + 1) * 8));
  EXPECT_FLOAT_EQ(l1.wq[(4 + 1) * 8 + 3], tiny_value(base + 2, (4 + 2) * 8 + 3));
  EXPECT_FLOAT_EQ(l1.wk[3 * 8], tiny_value(base + 3, 3 * 8));  // rows 0 and 3 are fixed points
  EXPECT_FLOAT_EQ(l1.wk[2 * 8], tiny_value(base + 3, 1 * 8));
  EXPECT_EQ(w->weight_dtypes, "f32 x 20");
}

TEST(WeightsLoaderTest, Qwen2KeepsRowOrderAndLoadsBiases) {
  std::vector<uint8_t> bytes;
  const auto w = load_tiny(options("qwen2", false, true), &bytes);
  EXPECT_EQ(w->config.architecture, Architecture::kQwen2);
  EXPECT_TRUE(w->config.qkv_bias);
  EXPECT_FALSE(w->config.tied_embeddings);
  ASSERT_EQ(w->output.size(), 80u);
  EXPECT_FLOAT_EQ(w->output[7], tiny_value(3, 7));
  const LayerWeights& l0 = w->layers[0];
  // ids: 1 embd, 2 norm, 3 output, 4 attn_norm, 5 q, 6 k, 7 v, 8 bq, 9 bk, 10 bv.
  EXPECT_FLOAT_EQ(l0.wq[1 * 8], tiny_value(5, 8));  // unpermuted
  ASSERT_EQ(l0.bq.size(), 8u);
  EXPECT_FLOAT_EQ(l0.bq[1], tiny_value(8, 1));
  EXPECT_FLOAT_EQ(l0.bk[3], tiny_value(9, 3));
  EXPECT_FLOAT_EQ(l0.bv[2], tiny_value(10, 2));
}

std::string load_error(const TinyGgufOptions& o) {
  try {
    std::vector<uint8_t> bytes;
    load_tiny(o, &bytes);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(WeightsLoaderTest, ErrorsNameTheFileAndTheTensor) {
  EXPECT_NE(load_error(options("llama", true, false, "blk.1.ffn_up.weight")).find("tiny.gguf: tensor 'blk.1.ffn_up.weight' is missing"),
            std::string::npos);
  EXPECT_NE(load_error(options("llama", true, false, "", "blk.0.attn_k.weight")).find("'blk.0.attn_k.weight' has shape [8, 5]"),
            std::string::npos);
  EXPECT_NE(load_error(options("qwen2", true, false)).find("attn_q.bias' is missing"), std::string::npos);
  std::vector<uint8_t> bytes = tiny_gguf(options("phi3", true, false)).bytes();
  const auto gguf = GgufFile::parse(bytes, "phi.gguf");
  try {
    model_config_from_gguf(*gguf);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture 'phi3' is not supported"), std::string::npos);
  }
}

TEST(WeightsLoaderTest, LoadsTheDefaultModel) {
  const auto path = test::default_model_path();
  KVB_REQUIRE_FILE(path);
  const LoadedModel model = load_model(path.string());
  const ModelWeights& w = *model.weights;
  const ModelConfig& c = w.config;
  // Shapes from the GGUF metadata as printed by the gguf PyPI package (see gguf_test.cc).
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.d_model, 576);
  EXPECT_EQ(c.n_query_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_dim, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.name, "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(w.weight_dtypes, "q4_1 x 210, f32 x 61, q8_0 x 1");
  EXPECT_EQ(model.chat_template, "chatml");
  // setup.sh's pinned checksum of the file.
  EXPECT_EQ(model.sha256, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
  ASSERT_EQ(w.token_embedding.size(), 49152u * 576u);
  // tests/goldens/dequantize_goldens.json: token_embd.weight[1234567] and output_norm.weight[575].
  EXPECT_NEAR(w.token_embedding[1234567], 0.2870464324951172, 1e-7);
  EXPECT_NEAR(w.output_norm[575], 1.984375, 1e-7);
  // blk.0.attn_q.weight goldens are in GGUF (permuted) order. Index 17 = GGUF row 0, a fixed point.
  // Index 100000 = GGUF row 173, column 352: head 2, in-head row 45 = 2*22 + 1 -> HF row 2*64 + 32 + 22.
  EXPECT_NEAR(w.layers[0].wq[17], 0.2841796875, 1e-7);
  EXPECT_NEAR(w.layers[0].wq[(2 * 64 + 32 + 22) * 576 + 352], -0.12225341796875, 1e-7);
  ASSERT_EQ(w.layers.size(), 30u);
  EXPECT_EQ(w.layers[29].w_down.size(), 576u * 1536u);
}

TEST(PresetsTest, PaperModelShapes) {
  const ModelConfig llama = preset_config("llama-3.1-8b");
  EXPECT_EQ(llama.n_layers, 32);
  EXPECT_EQ(llama.head_dim, 128);
  EXPECT_EQ(llama.kv_bytes_per_token(2), 131072);  // specs/engine-notes.md §5.1
  ASSERT_TRUE(llama.llama3_rope_scaling.has_value());
  EXPECT_EQ(llama.vocab_size, 128256);
  const ModelConfig qwen = preset_config("qwen2.5-7b");
  EXPECT_EQ(qwen.n_layers, 28);
  EXPECT_EQ(qwen.d_model, 3584);
  EXPECT_EQ(qwen.n_kv_heads, 4);
  EXPECT_EQ(qwen.head_dim, 128);
  EXPECT_TRUE(qwen.qkv_bias);
  const ModelConfig mistral = preset_config("mistral-7b");
  EXPECT_EQ(mistral.vocab_size, 32768);
  EXPECT_EQ(mistral.architecture, Architecture::kMistral);
  for (const auto& name : preset_names()) EXPECT_TRUE(preset_config(name).dummy_weights) << name;
  EXPECT_THROW(preset_config("gpt-5"), InputError);
}

TEST(PresetsTest, RandomWeightsAreDeterministicAndShaped) {
  const ModelConfig tiny = preset_config("tiny-llama");
  EXPECT_EQ(tiny.group_size(), 2);
  const auto a = random_weights(tiny, 7), b = random_weights(tiny, 7), other = random_weights(tiny, 8);
  EXPECT_EQ(a->layers[1].wq, b->layers[1].wq);
  EXPECT_NE(a->layers[1].wq, other->layers[1].wq);
  EXPECT_EQ(a->layers[0].wk.size(), 32u * 64u);
  EXPECT_EQ(a->output.size(), 256u * 64u);
  double sum_sq = 0;
  for (float v : a->layers[0].w_up) sum_sq += double(v) * v;
  EXPECT_NEAR(std::sqrt(sum_sq / a->layers[0].w_up.size()), 1.0 / 8.0, 0.01);  // std 1/sqrt(64)
  const LoadedModel m = load_model("preset:tiny-llama");
  EXPECT_EQ(m.weights->source, "preset:tiny-llama");
  EXPECT_EQ(m.tokenizer->encode("AB"), (std::vector<TokenId>{65, 66}));
  EXPECT_THROW(load_model("preset:nope"), InputError);
}

}  // namespace
}  // namespace kvb
