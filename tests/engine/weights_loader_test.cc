// GGUF -> ModelWeights: config from metadata, tensor mapping, RoPE row order, errors; presets.
#include "engine/weights_loader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "engine/model.h"
#include "engine/presets.h"
#include "engine/safetensors.h"
#include "tests/engine/tiny_gguf.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

// Element `index` of a row-major matrix with `cols` columns, decoded from its row.
float element(const WeightMatrix& m, int64_t index, int64_t cols) {
  std::vector<float> row(static_cast<size_t>(cols));
  m.row_to_f32(index / cols, cols, row.data());
  return row[index % cols];
}

using test::tiny_gguf;
using test::tiny_value;
using test::TinyGgufOptions;

// llama.cpp's converter: w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2).reshape(w.shape), written
// here as an explicit index map: converted row (h, i, j) at h*hd + 2i + j <- HF row h*hd + j*hd/2 +
// i.
std::vector<float> llama_cpp_permute(const std::vector<float>& hf, int n_heads, int hd, int in) {
  std::vector<float> out(hf.size());
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < hd / 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int c = 0; c < in; ++c)
          out[(size_t(h) * hd + 2 * i + j) * in + c] =
              hf[(size_t(h) * hd + j * (hd / 2) + i) * in + c];
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

TinyGgufOptions options(std::string arch, bool tied, bool bias, std::string skip = "",
                        std::string bad = "") {
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
  EXPECT_FLOAT_EQ(w->token_embedding.f32()[8 * 3 + 2],
                  tiny_value(1, 26));  // [vocab, d]: row 3, col 2
  const LayerWeights& l1 = w->layers[1];
  const int base = 2 + 9;  // layer 1's first id minus one (9 tensors per layer)
  EXPECT_FLOAT_EQ(l1.attn_norm[5], tiny_value(base + 1, 5));
  EXPECT_FLOAT_EQ(l1.wv.f32()[4 * 8 - 1], tiny_value(base + 4, 31));
  EXPECT_FLOAT_EQ(l1.wo.f32()[9], tiny_value(base + 5, 9));
  EXPECT_FLOAT_EQ(l1.w_down.f32()[16 * 8 - 1], tiny_value(base + 9, 127));
  EXPECT_EQ(l1.w_down.size(), 128u);
  // Q: GGUF head 1 row 2i+j holds HF row j*2+i (head_dim 4): GGUF row 1 (i=0,j=1) is HF row 2.
  EXPECT_FLOAT_EQ(l1.wq.f32()[(4 + 2) * 8 + 0], tiny_value(base + 2, (4 + 1) * 8));
  EXPECT_FLOAT_EQ(l1.wq.f32()[(4 + 1) * 8 + 3], tiny_value(base + 2, (4 + 2) * 8 + 3));
  EXPECT_FLOAT_EQ(l1.wk.f32()[3 * 8],
                  tiny_value(base + 3, 3 * 8));  // rows 0 and 3 are fixed points
  EXPECT_FLOAT_EQ(l1.wk.f32()[2 * 8], tiny_value(base + 3, 1 * 8));
  EXPECT_EQ(w->weight_dtypes, "f32 x 20");
}

TEST(WeightsLoaderTest, Qwen2KeepsRowOrderAndLoadsBiases) {
  std::vector<uint8_t> bytes;
  const auto w = load_tiny(options("qwen2", false, true), &bytes);
  EXPECT_EQ(w->config.architecture, Architecture::kQwen2);
  EXPECT_TRUE(w->config.qkv_bias);
  EXPECT_FALSE(w->config.tied_embeddings);
  ASSERT_EQ(w->output.size(), 80u);
  EXPECT_FLOAT_EQ(w->output.f32()[7], tiny_value(3, 7));
  const LayerWeights& l0 = w->layers[0];
  // ids: 1 embd, 2 norm, 3 output, 4 attn_norm, 5 q, 6 k, 7 v, 8 bq, 9 bk, 10 bv.
  EXPECT_FLOAT_EQ(l0.wq.f32()[1 * 8], tiny_value(5, 8));  // unpermuted
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
  EXPECT_NE(load_error(options("llama", true, false, "blk.1.ffn_up.weight"))
                .find("tiny.gguf: tensor 'blk.1.ffn_up.weight' is missing"),
            std::string::npos);
  EXPECT_NE(load_error(options("llama", true, false, "", "blk.0.attn_k.weight"))
                .find("'blk.0.attn_k.weight' has shape [8, 5]"),
            std::string::npos);
  EXPECT_NE(load_error(options("qwen2", true, false)).find("attn_q.bias' is missing"),
            std::string::npos);
  std::vector<uint8_t> bytes = tiny_gguf(options("phi3", true, false)).bytes();
  const auto gguf = GgufFile::parse(bytes, "phi.gguf");
  try {
    model_config_from_gguf(*gguf);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture 'phi3' is not supported"),
              std::string::npos);
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
  EXPECT_EQ(model.chat_template, "chatml-smollm2");
  ASSERT_NE(model.tokenizer, nullptr);
  EXPECT_EQ(model.tokenizer->vocab_size(), 49152);
  EXPECT_EQ(model.tokenizer->kind(), "bpe:smollm");
  // setup.sh's pinned checksum of the file.
  EXPECT_EQ(model.sha256, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
  ASSERT_EQ(w.token_embedding.size(), 49152u * 576u);
  // tests/goldens/dequantize_goldens.json: token_embd.weight[1234567] and output_norm.weight[575].
  EXPECT_NEAR(element(w.token_embedding, 1234567, 576), 0.2870464324951172, 1e-7);
  EXPECT_NEAR(w.output_norm[575], 1.984375, 1e-7);
  // blk.0.attn_q.weight goldens are in GGUF (permuted) order. Index 17 = GGUF row 0, a fixed point.
  // Index 100000 = GGUF row 173, column 352: head 2, in-head row 45 = 2*22 + 1 -> HF row 2*64 + 32
  // + 22.
  EXPECT_NEAR(element(w.layers[0].wq, 17, 576), 0.2841796875, 1e-7);
  EXPECT_NEAR(element(w.layers[0].wq, (2 * 64 + 32 + 22) * 576 + 352, 576), -0.12225341796875,
              1e-7);
  ASSERT_EQ(w.layers.size(), 30u);
  EXPECT_EQ(w.layers[29].w_down.size(), 576u * 1536u);
  // The matrices keep the file's blocks: q4_1 (20 bytes per 32 values), the embedding q8_0.
  EXPECT_EQ(w.layers[29].w_down.type(), 3u);
  EXPECT_EQ(w.layers[29].w_down.storage_bytes(), 576 * 1536 / 32 * 20);
  EXPECT_EQ(w.token_embedding.type(), 8u);
}

TEST(WeightsLoaderTest, F32FormatHoldsTheStoredBlocksDequantised) {
  const auto path = test::default_model_path();
  KVB_REQUIRE_FILE(path);
  const auto gguf = GgufFile::open(path);
  const auto stored = load_weights_from_gguf(*gguf, WeightFormat::kAsStored);
  const auto f32 = load_weights_from_gguf(*gguf, WeightFormat::kF32);
  EXPECT_TRUE(f32->layers[3].wq.is_f32());
  // Row-permuted (Q), plain (down) and the tied embedding: the same values either way.
  EXPECT_EQ(stored->layers[3].wq.to_f32(), f32->layers[3].wq.f32());
  EXPECT_EQ(stored->layers[3].w_down.to_f32(), f32->layers[3].w_down.f32());
  std::vector<float> row(576);
  stored->token_embedding.row_to_f32(4321, 576, row.data());
  EXPECT_TRUE(std::equal(row.begin(), row.end(), f32->token_embedding.f32().begin() + 4321 * 576));
}

// Writes `w` as an HF folder (two shards + index, config.json) and as a GGUF file the way
// llama.cpp's converter would (Q/K rows permuted for Llama); both must load back to exactly `w`.
void write_hf_folder(const ModelWeights& w, const std::filesystem::path& dir) {
  const ModelConfig& c = w.config;
  std::filesystem::create_directories(dir);
  nlohmann::json cfg = {
      {"architectures",
       {c.architecture == Architecture::kQwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"hidden_size", c.d_model},
      {"intermediate_size", c.ffn_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_query_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_context},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tied_embeddings}};
  std::ofstream(dir / "config.json") << cfg.dump();
  const int64_t d = c.d_model, q = int64_t{c.n_query_heads} * c.head_dim,
                kv = int64_t{c.n_kv_heads} * c.head_dim, f = c.ffn_dim;
  F32Tensors first, second;
  first["model.embed_tokens.weight"] = {{c.vocab_size, d}, w.token_embedding.f32()};
  second["model.norm.weight"] = {{d}, w.output_norm};
  if (!c.tied_embeddings) second["lm_head.weight"] = {{c.vocab_size, d}, w.output.f32()};
  for (int l = 0; l < c.n_layers; ++l) {
    F32Tensors& shard = l == 0 ? first : second;
    const LayerWeights& L = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    shard[p + "input_layernorm.weight"] = {{d}, L.attn_norm};
    shard[p + "self_attn.q_proj.weight"] = {{q, d}, L.wq.f32()};
    shard[p + "self_attn.k_proj.weight"] = {{kv, d}, L.wk.f32()};
    shard[p + "self_attn.v_proj.weight"] = {{kv, d}, L.wv.f32()};
    if (c.qkv_bias) {
      shard[p + "self_attn.q_proj.bias"] = {{q}, L.bq};
      shard[p + "self_attn.k_proj.bias"] = {{kv}, L.bk};
      shard[p + "self_attn.v_proj.bias"] = {{kv}, L.bv};
    }
    shard[p + "self_attn.o_proj.weight"] = {{d, q}, L.wo.f32()};
    shard[p + "post_attention_layernorm.weight"] = {{d}, L.ffn_norm};
    shard[p + "mlp.gate_proj.weight"] = {{f, d}, L.w_gate.f32()};
    shard[p + "mlp.up_proj.weight"] = {{f, d}, L.w_up.f32()};
    shard[p + "mlp.down_proj.weight"] = {{d, f}, L.w_down.f32()};
  }
  nlohmann::json map;
  for (const auto& [name, t] : first) map[name] = "model-00001-of-00002.safetensors";
  for (const auto& [name, t] : second) map[name] = "model-00002-of-00002.safetensors";
  write_safetensors(dir / "model-00001-of-00002.safetensors", first);
  write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
}

test::GgufBuilder gguf_like_llama_cpp(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const std::string a = c.architecture == Architecture::kQwen2 ? "qwen2" : "llama";
  const bool permute = a == "llama";
  test::GgufBuilder b;
  b.str("general.architecture", a)
      .u32(a + ".block_count", c.n_layers)
      .u32(a + ".context_length", c.max_context)
      .u32(a + ".embedding_length", c.d_model)
      .u32(a + ".feed_forward_length", c.ffn_dim)
      .u32(a + ".attention.head_count", c.n_query_heads)
      .u32(a + ".attention.head_count_kv", c.n_kv_heads)
      .f32(a + ".rope.freq_base", c.rope_theta)
      .f32(a + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  const int64_t d = c.d_model, q = int64_t{c.n_query_heads} * c.head_dim,
                kv = int64_t{c.n_kv_heads} * c.head_dim, f = c.ffn_dim;
  b.f32_tensor("token_embd.weight", {d, c.vocab_size}, w.token_embedding.f32());
  b.f32_tensor("output_norm.weight", {d}, w.output_norm);
  if (!c.tied_embeddings) b.f32_tensor("output.weight", {d, c.vocab_size}, w.output.f32());
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    b.f32_tensor(p + "attn_norm.weight", {d}, L.attn_norm);
    b.f32_tensor(p + "attn_q.weight", {d, q},
                 permute ? llama_cpp_permute(L.wq.f32(), c.n_query_heads, c.head_dim, c.d_model)
                         : L.wq.f32());
    b.f32_tensor(
        p + "attn_k.weight", {d, kv},
        permute ? llama_cpp_permute(L.wk.f32(), c.n_kv_heads, c.head_dim, c.d_model) : L.wk.f32());
    b.f32_tensor(p + "attn_v.weight", {d, kv}, L.wv.f32());
    if (c.qkv_bias) {
      b.f32_tensor(p + "attn_q.bias", {q},
                   permute ? llama_cpp_permute(L.bq, c.n_query_heads, c.head_dim, 1) : L.bq);
      b.f32_tensor(p + "attn_k.bias", {kv},
                   permute ? llama_cpp_permute(L.bk, c.n_kv_heads, c.head_dim, 1) : L.bk);
      b.f32_tensor(p + "attn_v.bias", {kv}, L.bv);
    }
    b.f32_tensor(p + "attn_output.weight", {q, d}, L.wo.f32());
    b.f32_tensor(p + "ffn_norm.weight", {d}, L.ffn_norm);
    b.f32_tensor(p + "ffn_gate.weight", {d, f}, L.w_gate.f32());
    b.f32_tensor(p + "ffn_up.weight", {d, f}, L.w_up.f32());
    b.f32_tensor(p + "ffn_down.weight", {f, d}, L.w_down.f32());
  }
  return b;
}

void expect_same_weights(const ModelWeights& a, const ModelWeights& b) {
  EXPECT_EQ(a.token_embedding, b.token_embedding);
  EXPECT_EQ(a.output_norm, b.output_norm);
  EXPECT_EQ(a.output, b.output);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const LayerWeights &x = a.layers[l], &y = b.layers[l];
    EXPECT_EQ(x.attn_norm, y.attn_norm);
    EXPECT_EQ(x.wq, y.wq);
    EXPECT_EQ(x.wk, y.wk);
    EXPECT_EQ(x.wv, y.wv);
    EXPECT_EQ(x.bq, y.bq);
    EXPECT_EQ(x.bk, y.bk);
    EXPECT_EQ(x.bv, y.bv);
    EXPECT_EQ(x.wo, y.wo);
    EXPECT_EQ(x.ffn_norm, y.ffn_norm);
    EXPECT_EQ(x.w_gate, y.w_gate);
    EXPECT_EQ(x.w_up, y.w_up);
    EXPECT_EQ(x.w_down, y.w_down);
  }
}

TEST(WeightsLoaderTest, HfFolderAndLlamaCppGgufLoadToTheSameWeights) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvb_hf_equiv_" + std::to_string(::getpid()));
  for (bool qwen : {false, true}) {
    SCOPED_TRACE(qwen ? "qwen2" : "llama");
    ModelConfig c = preset_config("tiny-llama");
    if (qwen) {
      c.architecture = Architecture::kQwen2;
      c.qkv_bias = true;
      c.tied_embeddings = true;
    }
    const auto truth = random_weights(c, 99);
    std::filesystem::remove_all(dir);
    write_hf_folder(*truth, dir);
    const auto hf = load_weights_from_hf_folder(dir);
    expect_same_weights(*hf, *truth);
    EXPECT_EQ(hf->config.qkv_bias, qwen);
    EXPECT_EQ(hf->config.tied_embeddings, qwen);
    EXPECT_EQ(hf->weight_dtypes, qwen ? "f32 x 26" : "f32 x 21");
    const auto bytes = gguf_like_llama_cpp(*truth).bytes();
    const auto gguf = load_weights_from_gguf(*GgufFile::parse(bytes, "equiv.gguf"));
    expect_same_weights(*gguf, *truth);
    EXPECT_FALSE(gguf->config.rope_interleaved_pairs);
    // inspect_model reads the folder's metadata; load_model needs a tokenizer, and says so.
    const ModelSummary summary = inspect_model(dir.string());
    EXPECT_EQ(summary.format, "hf-safetensors");
    EXPECT_EQ(summary.n_parameters,
              static_cast<int64_t>(
                  truth->token_embedding.size() * (qwen ? 1 : 2) + truth->output_norm.size() +
                  2 * (truth->layers[0].wq.size() + 2 * truth->layers[0].wk.size() +
                       truth->layers[0].wo.size() + 3 * truth->layers[0].w_up.size() + 128 +
                       (qwen ? 128 : 0))));
    EXPECT_EQ(summary.dtype_counts.at("f32"), qwen ? 26 : 21);
    EXPECT_NE(summary.tokenizer_kind.find("unusable"), std::string::npos);
    try {
      load_model(dir.string());
      ADD_FAILURE() << "expected an InputError for the missing tokenizer";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(PresetsTest, PaperModelShapes) {
  const ModelConfig llama = preset_config("llama-3.1-8b");
  EXPECT_EQ(llama.n_layers, 32);
  EXPECT_EQ(llama.head_dim, 128);
  EXPECT_EQ(llama.kv_bytes_per_token(2), 131072);  // docs/engine.md §3.1
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
  const auto a = random_weights(tiny, 7), b = random_weights(tiny, 7),
             other = random_weights(tiny, 8);
  EXPECT_EQ(a->layers[1].wq, b->layers[1].wq);
  EXPECT_NE(a->layers[1].wq, other->layers[1].wq);
  EXPECT_EQ(a->layers[0].wk.size(), 32u * 64u);
  EXPECT_EQ(a->output.size(), 256u * 64u);
  double sum_sq = 0;
  for (float v : a->layers[0].w_up.f32()) sum_sq += double(v) * v;
  EXPECT_NEAR(std::sqrt(sum_sq / a->layers[0].w_up.size()), 1.0 / 8.0, 0.01);  // std 1/sqrt(64)
  const LoadedModel m = load_model("preset:tiny-llama");
  EXPECT_EQ(m.weights->source, "preset:tiny-llama");
  EXPECT_EQ(m.tokenizer->encode("AB"), (std::vector<TokenId>{65, 66}));
  EXPECT_THROW(load_model("preset:nope"), InputError);
}

}  // namespace
}  // namespace kvb
