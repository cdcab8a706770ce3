#include "engine/presets.h"

#include <tbb/parallel_for.h>

#include <cmath>

#include "common/errors.h"
#include "common/strings.h"

namespace kvb {
namespace {

ModelConfig make(const char* name, Architecture arch, int layers, int d, int hq, int hkv, int ffn,
                 int vocab, int context, float eps, float theta) {
  ModelConfig c;
  c.name = std::string(name) + " (dummy)";
  c.architecture = arch;
  c.n_layers = layers;
  c.d_model = d;
  c.n_query_heads = hq;
  c.n_kv_heads = hkv;
  c.head_dim = d / hq;
  c.ffn_dim = ffn;
  c.vocab_size = vocab;
  c.max_context = context;
  c.rms_norm_eps = eps;
  c.rope_theta = theta;
  c.dummy_weights = true;
  return c;
}

// Uniform values in [-a, a] with a = std * sqrt(3); element i depends only on (stream, i), so the
// result does not depend on how the range is split across threads.
void fill_uniform(std::vector<float>& out, size_t n, float std_dev, uint64_t stream) {
  out.resize(n);
  const float a = std_dev * std::sqrt(3.0f);
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, n, 1 << 16), [&](const tbb::blocked_range<size_t>& r) {
        for (size_t i = r.begin(); i < r.end(); ++i) {
          const uint64_t bits = splitmix64(stream ^ splitmix64(i));
          const float unit = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
          out[i] = (2.0f * unit - 1.0f) * a;
        }
      });
}

void fill_uniform(WeightMatrix& out, size_t n, float std_dev, uint64_t stream) {
  std::vector<float> values;
  fill_uniform(values, n, std_dev, stream);
  out = WeightMatrix(std::move(values));
}

}  // namespace

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<std::string> preset_names() {
  return {"llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "tiny-llama"};
}

ModelConfig preset_config(const std::string& name) {
  if (name == "llama-3.1-8b") {  // meta-llama/Llama-3.1-8B-Instruct config.json
    ModelConfig c = make("llama-3.1-8b", Architecture::kLlama, 32, 4096, 32, 8, 14336, 128256,
                         131072, 1e-5f, 500000.0f);
    c.llama3_rope_scaling = Llama3RopeScaling{8.0f, 1.0f, 4.0f, 8192};
    return c;
  }
  if (name == "mistral-7b")  // mistralai/Mistral-7B-Instruct-v0.3 config.json
    return make("mistral-7b", Architecture::kMistral, 32, 4096, 32, 8, 14336, 32768, 32768, 1e-5f,
                1000000.0f);
  if (name == "qwen2.5-7b") {  // Qwen/Qwen2.5-7B-Instruct config.json
    ModelConfig c = make("qwen2.5-7b", Architecture::kQwen2, 28, 3584, 28, 4, 18944, 152064, 32768,
                         1e-6f, 1000000.0f);
    c.qkv_bias = true;
    return c;
  }
  if (name == "tiny-llama")  // for tests: 2 layers, d = 64, GQA 4:2, head_dim 16, byte vocabulary
    return make("tiny-llama", Architecture::kLlama, 2, 64, 4, 2, 128, 256, 2048, 1e-5f, 10000.0f);
  const std::string known = join(preset_names(), ", ");
  throw InputError("unknown preset '" + name + "' (known: " + known + ")");
}

std::shared_ptr<ModelWeights> random_weights(const ModelConfig& config, uint64_t seed) {
  auto w = std::make_shared<ModelWeights>();
  w->config = config;
  w->config.dummy_weights = true;
  const ModelConfig& c = w->config;
  const size_t d = c.d_model, q = size_t(c.n_query_heads) * c.head_dim,
               kv = size_t(c.n_kv_heads) * c.head_dim, ffn = c.ffn_dim, vocab = c.vocab_size;
  uint64_t stream = splitmix64(seed);
  auto next = [&] { return stream = splitmix64(stream); };
  const float in_d = 1.0f / std::sqrt(float(d)), in_q = 1.0f / std::sqrt(float(q)),
              in_ffn = 1.0f / std::sqrt(float(ffn));
  fill_uniform(w->token_embedding, vocab * d, 1.0f, next());
  w->output_norm.assign(d, 1.0f);
  if (!c.tied_embeddings) fill_uniform(w->output, vocab * d, in_d, next());
  w->layers.resize(c.n_layers);
  for (LayerWeights& layer : w->layers) {
    layer.attn_norm.assign(d, 1.0f);
    layer.ffn_norm.assign(d, 1.0f);
    fill_uniform(layer.wq, q * d, in_d, next());
    fill_uniform(layer.wk, kv * d, in_d, next());
    fill_uniform(layer.wv, kv * d, in_d, next());
    if (c.qkv_bias) {
      fill_uniform(layer.bq, q, 0.02f, next());
      fill_uniform(layer.bk, kv, 0.02f, next());
      fill_uniform(layer.bv, kv, 0.02f, next());
    }
    fill_uniform(layer.wo, d * q, in_q, next());
    fill_uniform(layer.w_gate, ffn * d, in_d, next());
    fill_uniform(layer.w_up, ffn * d, in_d, next());
    fill_uniform(layer.w_down, d * ffn, in_ffn, next());
  }
  w->source = "preset:" + c.name;
  w->weight_dtypes = "f32 (random, seed " + std::to_string(seed) + ")";
  return w;
}

}  // namespace kvb
