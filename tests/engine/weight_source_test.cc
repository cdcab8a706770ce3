// The per-tensor weight source (engine/weight_source.h) and the synthetic checkpoint writer
// (engine/synthetic_checkpoint.h): a tiny synthetic HF folder loads through the host path to the
// weights an independent reading of its safetensors gives (the test's own name table), with the
// same logits; chunked bf16 reads equal the rounded f32 reads, permuted GGUF rows included.
#include "engine/weight_source.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "engine/cpu/forward.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "engine/synthetic_checkpoint.h"
#include "kernels/cpu/dequantize.h"
#include "tests/engine/tiny_gguf.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_config(Architecture arch) {
  ModelConfig c;
  c.name = "synthetic-tiny";
  c.architecture = arch;
  c.n_layers = 2;
  c.d_model = 64;
  c.n_query_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 96;
  c.vocab_size = 300;
  c.max_context = 512;
  c.rope_theta = 10000.0f;
  if (arch == Architecture::kQwen2) {
    c.qkv_bias = true;
    c.tied_embeddings = true;
  } else {
    c.llama3_rope_scaling = Llama3RopeScaling{8.0f, 1.0f, 4.0f, 64};
  }
  return c;
}

// The folder's tensors read with the plain safetensors reader through names written out here,
// independently of the loader's table.
ModelWeights read_independently(const fs::path& dir, const ModelConfig& config) {
  const SafetensorsModel files = SafetensorsModel::open_folder(dir);
  ModelWeights w;
  w.config = config;
  w.token_embedding = files.read_f32("model.embed_tokens.weight");
  w.output_norm = files.read_f32("model.norm.weight");
  if (!config.tied_embeddings) w.output = files.read_f32("lm_head.weight");
  for (int l = 0; l < config.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights layer;
    layer.attn_norm = files.read_f32(p + "input_layernorm.weight");
    layer.wq = files.read_f32(p + "self_attn.q_proj.weight");
    layer.wk = files.read_f32(p + "self_attn.k_proj.weight");
    layer.wv = files.read_f32(p + "self_attn.v_proj.weight");
    if (config.qkv_bias) {
      layer.bq = files.read_f32(p + "self_attn.q_proj.bias");
      layer.bk = files.read_f32(p + "self_attn.k_proj.bias");
      layer.bv = files.read_f32(p + "self_attn.v_proj.bias");
    }
    layer.wo = files.read_f32(p + "self_attn.o_proj.weight");
    layer.ffn_norm = files.read_f32(p + "post_attention_layernorm.weight");
    layer.w_gate = files.read_f32(p + "mlp.gate_proj.weight");
    layer.w_up = files.read_f32(p + "mlp.up_proj.weight");
    layer.w_down = files.read_f32(p + "mlp.down_proj.weight");
    w.layers.push_back(std::move(layer));
  }
  return w;
}

std::vector<float> last_logits(const ModelWeights& weights, const std::vector<TokenId>& ids) {
  CpuEngine engine(weights);
  const ModelConfig& c = weights.config;
  KvStore store(c.n_layers, c.n_kv_heads, c.head_dim);
  return engine.forward_chunk(ids, store, CaptureRequest{}, nullptr);
}

std::vector<char> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SyntheticCheckpoint, TinyFolderLoadsLikeAnIndependentReadingWithTheSameLogits) {
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen2}) {
    SCOPED_TRACE(architecture_name(arch));
    const ModelConfig config = tiny_config(arch);
    const fs::path dir = test::fresh_temp_dir("kvb_synthetic_tiny");
    SyntheticCheckpointOptions options;
    options.seed = 7;
    options.shard_bytes = 40 << 10;  // several shards, as an 8B folder has
    write_synthetic_checkpoint(config, dir, options);
    ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
    int shards = 0;
    for (const auto& entry : fs::directory_iterator(dir))
      shards += entry.path().extension() == ".safetensors";
    EXPECT_GE(shards, 3);

    const LoadedModel loaded = load_model(dir.string(), {.weight_format = WeightFormat::kF32});
    const ModelWeights& w = *loaded.weights;
    EXPECT_EQ(w.config.n_layers, config.n_layers);
    EXPECT_EQ(w.config.qkv_bias, config.qkv_bias);
    EXPECT_EQ(w.config.tied_embeddings, config.tied_embeddings);
    EXPECT_EQ(w.config.llama3_rope_scaling.has_value(), config.llama3_rope_scaling.has_value());
    EXPECT_EQ(w.weight_dtypes, arch == Architecture::kQwen2 ? "bf16 x 26" : "bf16 x 21");
    const ModelWeights truth = read_independently(dir, w.config);
    EXPECT_EQ(w.token_embedding, truth.token_embedding);
    EXPECT_EQ(w.output, truth.output);
    for (int l = 0; l < config.n_layers; ++l) {
      EXPECT_EQ(w.layers[l].wq, truth.layers[l].wq);
      EXPECT_EQ(w.layers[l].bk, truth.layers[l].bk);
      EXPECT_EQ(w.layers[l].wo, truth.layers[l].wo);
      EXPECT_EQ(w.layers[l].w_down, truth.layers[l].w_down);
      EXPECT_EQ(w.layers[l].ffn_norm, truth.layers[l].ffn_norm);
    }
    // Norm gains around 1, linear weights within ±sqrt(3 / fan_in): the roles got their ranges.
    for (float g : truth.layers[0].attn_norm) EXPECT_TRUE(g >= 0.74f && g <= 1.26f) << g;
    for (float x : truth.layers[1].w_down.f32())
      EXPECT_LE(std::abs(x), std::sqrt(3.0f / 96) * 1.01f);

    const std::vector<TokenId> ids = loaded.tokenizer->encode("Hi there!", true);
    ASSERT_EQ(ids.size(), 10u);
    EXPECT_EQ(ids[0], config.vocab_size - 2);  // BOS at the top of the vocabulary
    EXPECT_EQ(ids[1], 'H');
    EXPECT_EQ(last_logits(w, ids), last_logits(truth, ids));

    // The CPU engine's default keeps the matrices' stored bf16 through the same table: the same
    // values with no f32 copy, and logits within the stored path's tolerance of the f32 ones.
    const LoadedModel stored = load_model(dir.string());
    const ModelWeights& s = *stored.weights;
    EXPECT_EQ(s.weight_dtypes, w.weight_dtypes);
    EXPECT_EQ(s.token_embedding.type(), static_cast<uint32_t>(GgmlType::kBF16));
    EXPECT_EQ(s.token_embedding.to_f32(), truth.token_embedding.f32());
    for (int l = 0; l < config.n_layers; ++l) {
      EXPECT_EQ(s.layers[l].wq.type(), static_cast<uint32_t>(GgmlType::kBF16));
      EXPECT_EQ(s.layers[l].wq.to_f32(), truth.layers[l].wq.f32());
      EXPECT_EQ(s.layers[l].wk.to_f32(), truth.layers[l].wk.f32());
      EXPECT_EQ(s.layers[l].w_down.to_f32(), truth.layers[l].w_down.f32());
      EXPECT_EQ(s.layers[l].bk, truth.layers[l].bk);
    }
    const std::vector<float> reference = last_logits(truth, ids), got = last_logits(s, ids);
    ASSERT_EQ(got.size(), reference.size());
    float scale = 0;
    for (float x : reference) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], reference[i], 0.05f * scale) << i;
  }
}

TEST(SyntheticCheckpoint, SameSeedSameBytesOtherSeedOtherBytes) {
  const ModelConfig config = tiny_config(Architecture::kLlama);
  const fs::path a = test::fresh_temp_dir("kvb_synthetic_a"),
                 b = test::fresh_temp_dir("kvb_synthetic_b"),
                 c = test::fresh_temp_dir("kvb_synthetic_c");
  write_synthetic_checkpoint(config, a, {.seed = 3});
  write_synthetic_checkpoint(config, b, {.seed = 3});
  write_synthetic_checkpoint(config, c, {.seed = 4});
  const std::string shard = "model-00001-of-00001.safetensors";
  EXPECT_EQ(file_bytes(a / shard), file_bytes(b / shard));
  EXPECT_NE(file_bytes(a / shard), file_bytes(c / shard));
  EXPECT_EQ(file_bytes(a / "config.json"), file_bytes(b / "config.json"));
}

TEST(SyntheticCheckpoint, RefusesAVocabularyWithoutRoomForTheByteTokens) {
  ModelConfig config = tiny_config(Architecture::kLlama);
  config.vocab_size = 256;
  EXPECT_THROW(write_synthetic_checkpoint(config, test::fresh_temp_dir("kvb_synthetic_small")),
               InputError);
}

// Chunked reads of every tensor (bf16, f32 and as stored) against one whole read: the row mapping,
// including the un-permutation of a llama.cpp GGUF's Q/K rows, does not depend on where a chunk
// starts.
void expect_chunked_reads_match(const WeightSource& source, int64_t chunk_rows) {
  for (const WeightTensor& t : source.tensors()) {
    SCOPED_TRACE(t.name);
    std::vector<float> whole(static_cast<size_t>(t.elements()));
    source.read_rows(t, 0, t.rows, whole.data());
    for (int64_t first = 0; first < t.rows; first += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, t.rows - first);
      std::vector<uint16_t> bf16(static_cast<size_t>(rows * t.cols));
      std::vector<float> f32(bf16.size());
      source.read_rows_bf16(t, first, rows, bf16.data());
      source.read_rows(t, first, rows, f32.data());
      for (size_t i = 0; i < bf16.size(); ++i) {
        const float expected = whole[static_cast<size_t>(first * t.cols) + i];
        ASSERT_EQ(f32[i], expected) << "element " << i << " of rows from " << first;
        ASSERT_EQ(bf16[i], f32_to_bf16(expected)) << "element " << i << " of rows from " << first;
      }
      // The same rows undecoded (what the CPU engine keeps), decoded here: the same row mapping.
      std::vector<uint8_t> stored(static_cast<size_t>(rows * source.stored_row_bytes(t)));
      source.read_stored_rows(t, first, rows, stored.data());
      std::vector<float> decoded(f32.size());
      dequantize(t.stored_type, stored.data(), decoded.data(), rows * t.cols);
      ASSERT_EQ(decoded, f32) << "rows from " << first;
    }
  }
}

TEST(WeightSource, ChunkedReadsMatchWholeReadsInGgufAndHfFolders) {
  for (const char* arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    test::TinyGgufOptions o;
    o.architecture = arch;
    o.qkv_bias = std::string(arch) == "qwen2";
    const std::vector<uint8_t> bytes = test::tiny_gguf(o).bytes();
    const auto gguf = GgufFile::parse(bytes, "tiny.gguf");
    const auto source = gguf_weight_source(*gguf);
    EXPECT_EQ(source->tensors()[3].rope_heads, std::string(arch) == "llama" ? 2 : 0);  // wq
    for (int64_t chunk : {1, 3, 5}) expect_chunked_reads_match(*source, chunk);
  }
  const fs::path dir = test::fresh_temp_dir("kvb_synthetic_chunks");
  write_synthetic_checkpoint(tiny_config(Architecture::kQwen2), dir);
  const auto hf = open_weight_source(dir);
  EXPECT_EQ(hf->tensors().size(), 26u);
  for (int64_t chunk : {1, 7}) expect_chunked_reads_match(*hf, chunk);
  for (const WeightTensor& t : hf->tensors()) hf->release(t);  // the mapping stays readable
  expect_chunked_reads_match(*hf, 64);
}

TEST(WeightSource, DeviceOnlyLoadKeepsTheConfigAndNoTensors) {
  const fs::path dir = test::fresh_temp_dir("kvb_synthetic_device_only");
  write_synthetic_checkpoint(tiny_config(Architecture::kLlama), dir);
  const LoadedModel loaded = load_model(dir.string(), {.weights_on_host = false});
  EXPECT_TRUE(weights_live_on_device_only(*loaded.weights));
  EXPECT_EQ(loaded.weights->config.d_model, 64);
  EXPECT_EQ(loaded.weights->weight_dtypes, "bf16 x 21");
  EXPECT_EQ(loaded.weights->source, dir.string());
  EXPECT_FALSE(weights_live_on_device_only(*load_model(dir.string()).weights));
}

}  // namespace
}  // namespace kvb
