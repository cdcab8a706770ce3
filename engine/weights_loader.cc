// GGUF -> ModelWeights. Tensor names follow llama.cpp (src/llama-arch.cpp): token_embd,
// blk.N.attn_q, attn_k, attn_v, attn_output, attn_norm, ffn_gate, ffn_up, ffn_down, ffn_norm,
// output_norm, output (absent = tied to token_embd), rope_freqs (Llama-3.x frequency factors).
#include "engine/weights_loader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <numbers>

#include "engine/errors.h"
#include "engine/hf_config.h"
#include "engine/safetensors.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantized_matmul.h"

namespace kvb {
namespace {

std::string stem_of(const std::string& path) { return std::filesystem::path(path).stem().string(); }

int positive_int(const GgufFile& gguf, const std::string& key, int64_t limit) {
  const int64_t v = gguf.get_int(key);
  if (v <= 0 || v > limit)
    throw FormatError(gguf.label() + ": GGUF metadata key '" + key + "' = " + std::to_string(v) +
                      " is outside 1.." + std::to_string(limit));
  return static_cast<int>(v);
}

// The factors llama.cpp writes into rope_freqs.weight for a Llama-3.x "llama3" scaling: frequency i
// is divided by factor i (HF transformers: _compute_llama3_parameters).
std::vector<float> llama3_factors(const Llama3RopeScaling& s, float theta, int head_dim) {
  std::vector<float> factors;
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(s.factor);
    } else {
      const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return factors;
}

// GGUF stores Llama-3.x scaling only as the factor tensor; recover the parameters by matching the
// published settings (Llama-3.1: factor 8; Llama-3.2: factor 32; both low 1, high 4, original
// 8192).
Llama3RopeScaling llama3_scaling_from_factors(const GgufFile& gguf,
                                              const std::vector<float>& factors, float theta,
                                              int head_dim) {
  for (float factor : {8.0f, 16.0f, 32.0f, 4.0f, 2.0f}) {
    Llama3RopeScaling s;
    s.factor = factor;
    const auto expected = llama3_factors(s, theta, head_dim);
    if (expected.size() != factors.size()) break;
    bool same = true;
    for (size_t i = 0; i < factors.size() && same; ++i)
      same = std::fabs(expected[i] - factors[i]) <= 1e-3f * expected[i];
    if (same) return s;
  }
  throw FormatError(gguf.label() +
                    ": tensor 'rope_freqs.weight' does not match a Llama-3 'llama3' RoPE "
                    "scaling (factor 2/4/8/16/32, low 1, high 4, original 8192); this model's RoPE "
                    "is unsupported");
}

void check_shape(const GgufFile& gguf, const GgufTensorInfo& info, std::vector<int64_t> expected) {
  if (info.shape != expected) {
    auto show = [](const std::vector<int64_t>& s) {
      std::string out = "[";
      for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
      return out + "]";
    };
    throw FormatError(gguf.label() + ": tensor '" + info.name + "' has shape " + show(info.shape) +
                      " but the metadata implies " + show(expected));
  }
}

class GgufWeightReader {
 public:
  GgufWeightReader(const GgufFile& gguf, WeightFormat format) : gguf_(gguf), format_(format) {}

  // The tensor decoded to f32, after checking its ggml shape; empty when optional and absent.
  std::vector<float> read(const std::string& name, std::vector<int64_t> shape,
                          bool optional = false) {
    const GgufTensorInfo* info = find(name, std::move(shape), optional);
    if (info == nullptr) return {};
    std::vector<float> values = dequantize_tensor(gguf_, *info);
    gguf_.release_pages(*info);
    return values;
  }

  // A weight matrix: its blocks as stored when the format asks for it and the matrix kernels
  // compute on them (rows of whole blocks), else dequantised to f32.
  WeightMatrix read_matrix(const std::string& name, std::vector<int64_t> shape,
                           bool optional = false) {
    const GgufTensorInfo* info = find(name, std::move(shape), optional);
    if (info == nullptr) return {};
    WeightMatrix matrix;
    if (format_ == WeightFormat::kAsStored && info->type != 0 &&
        kernels::stored_matmul_supported(info->type, info->shape[0])) {
      const auto bytes = gguf_.tensor_bytes(*info);
      matrix = WeightMatrix::encoded(info->type, {bytes.begin(), bytes.end()}, info->elements());
    } else {
      matrix = dequantize_tensor(gguf_, *info);
    }
    gguf_.release_pages(*info);
    return matrix;
  }

  std::string dtypes() const {
    return describe_dtype_counts(
        std::vector<std::pair<std::string, int>>(counts_.begin(), counts_.end()));
  }

 private:
  // The tensor's info after checking its shape; nullptr when optional and absent.
  const GgufTensorInfo* find(const std::string& name, std::vector<int64_t> shape, bool optional) {
    const GgufTensorInfo* info = gguf_.tensor(name);
    if (info == nullptr) {
      if (optional) return nullptr;
      throw FormatError(gguf_.label() + ": tensor '" + name + "' is missing");
    }
    check_shape(gguf_, *info, std::move(shape));
    ++counts_[ggml_type_name(info->type)];
    return info;
  }

  const GgufFile& gguf_;
  WeightFormat format_;
  std::map<std::string, int> counts_;
};

}  // namespace

std::string describe_dtype_counts(const std::vector<std::pair<std::string, int>>& counts) {
  auto sorted = counts;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [name, count] : sorted)
    out += (out.empty() ? "" : ", ") + name + " x " + std::to_string(count);
  return out;
}

ModelConfig model_config_from_gguf(const GgufFile& gguf) {
  const std::string arch = gguf.get_string("general.architecture");
  ModelConfig c;
  if (arch == "llama") {
    c.architecture = Architecture::kLlama;
  } else if (arch == "mistral") {
    c.architecture = Architecture::kMistral;
  } else if (arch == "qwen2") {
    c.architecture = Architecture::kQwen2;
  } else {
    throw InputError(gguf.label() + ": general.architecture '" + arch +
                     "' is not supported (supported: llama, mistral, qwen2)");
  }
  c.name = stem_of(gguf.label());
  const std::string p = arch + ".";
  constexpr int64_t kMaxDim = 1 << 20;
  c.n_layers = positive_int(gguf, p + "block_count", 1024);
  c.d_model = positive_int(gguf, p + "embedding_length", kMaxDim);
  c.ffn_dim = positive_int(gguf, p + "feed_forward_length", kMaxDim);
  c.n_query_heads = positive_int(gguf, p + "attention.head_count", 4096);
  c.n_kv_heads = gguf.has(p + "attention.head_count_kv")
                     ? positive_int(gguf, p + "attention.head_count_kv", 4096)
                     : c.n_query_heads;
  if (c.n_query_heads % c.n_kv_heads != 0)
    throw FormatError(gguf.label() + ": attention.head_count " + std::to_string(c.n_query_heads) +
                      " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  c.head_dim = gguf.has(p + "attention.key_length")
                   ? positive_int(gguf, p + "attention.key_length", 4096)
                   : c.d_model / c.n_query_heads;
  if (c.head_dim % 2 != 0 ||
      (!gguf.has(p + "attention.key_length") && c.d_model % c.n_query_heads != 0))
    throw FormatError(gguf.label() + ": head dimension " + std::to_string(c.head_dim) +
                      " is not usable with RoPE");
  c.max_context = positive_int(gguf, p + "context_length", int64_t{1} << 24);
  c.rms_norm_eps = static_cast<float>(gguf.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(gguf.get_float(p + "rope.freq_base", 10000.0));
  if (gguf.has(p + "vocab_size")) {
    c.vocab_size = positive_int(gguf, p + "vocab_size", int64_t{1} << 24);
  } else if (const GgufTensorInfo* embd = gguf.tensor("token_embd.weight");
             embd && embd->shape.size() == 2) {
    c.vocab_size = static_cast<int>(embd->shape[1]);
  } else {
    c.vocab_size = static_cast<int>(gguf.get_string_array("tokenizer.ggml.tokens").size());
  }
  c.tied_embeddings = gguf.tensor("output.weight") == nullptr;
  c.qkv_bias =
      c.architecture == Architecture::kQwen2 || gguf.tensor("blk.0.attn_q.bias") != nullptr;
  if (const GgufTensorInfo* freqs = gguf.tensor("rope_freqs.weight")) {
    check_shape(gguf, *freqs, {c.head_dim / 2});
    c.llama3_rope_scaling = llama3_scaling_from_factors(gguf, dequantize_tensor(gguf, *freqs),
                                                        c.rope_theta, c.head_dim);
  }
  return c;
}

std::vector<float> dequantize_tensor(const GgufFile& gguf, const GgufTensorInfo& info) {
  if (!dequantize_supported(info.type)) {
    std::string supported;
    for (uint32_t type = 0; type < 64; ++type)
      if (dequantize_supported(type))
        supported += (supported.empty() ? "" : ", ") + std::string(ggml_type_name(type));
    throw FormatError(gguf.label() + ": tensor '" + info.name + "' has type " +
                      ggml_type_name(info.type) + " (" + std::to_string(info.type) +
                      "), which this engine cannot decode (supported: " + supported + ")");
  }
  const auto bytes = gguf.tensor_bytes(info);
  std::vector<float> out(static_cast<size_t>(info.elements()));
  dequantize(info.type, bytes.data(), out.data(), info.elements());
  return out;
}

std::vector<int64_t> unpermute_rope_order(int n_heads, int head_dim) {
  std::vector<int64_t> order(static_cast<size_t>(n_heads) * head_dim);
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < half; ++i)
      for (int j = 0; j < 2; ++j)
        order[static_cast<size_t>(h) * head_dim + j * half + i] =
            static_cast<int64_t>(h) * head_dim + 2 * i + j;
  return order;
}

void unpermute_rope_rows(std::vector<float>& rows, int n_heads, int head_dim, int row_len) {
  WeightMatrix matrix(std::move(rows));
  matrix.permute_rows(unpermute_rope_order(n_heads, head_dim), row_len);
  rows = matrix.f32();
}

void unpermute_rope_rows(WeightMatrix& rows, int n_heads, int head_dim, int row_len) {
  rows.permute_rows(unpermute_rope_order(n_heads, head_dim), row_len);
}

std::shared_ptr<ModelWeights> load_weights_from_gguf(const GgufFile& gguf, WeightFormat format) {
  auto w = std::make_shared<ModelWeights>();
  w->config = model_config_from_gguf(gguf);
  w->source = gguf.label();
  const ModelConfig& c = w->config;
  const int64_t d = c.d_model, q_rows = int64_t{c.n_query_heads} * c.head_dim,
                kv_rows = int64_t{c.n_kv_heads} * c.head_dim, ffn = c.ffn_dim;
  // Llama-architecture GGUFs (and Mistral, converted by the same class) carry the RoPE row
  // permutation; Qwen2 GGUFs are not permuted (llama.cpp runs them with NeoX-style RoPE).
  const bool permuted = c.architecture != Architecture::kQwen2;
  w->config.rope_interleaved_pairs =
      false;  // after un-permuting, every loaded model uses (i, i + hd/2)

  GgufWeightReader reader(gguf, format);
  w->token_embedding = reader.read_matrix("token_embd.weight", {d, c.vocab_size});
  w->output_norm = reader.read("output_norm.weight", {d});
  w->output = reader.read_matrix("output.weight", {d, c.vocab_size}, /*optional=*/true);
  w->layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& layer = w->layers[l];
    layer.attn_norm = reader.read(p + "attn_norm.weight", {d});
    layer.wq = reader.read_matrix(p + "attn_q.weight", {d, q_rows});
    layer.wk = reader.read_matrix(p + "attn_k.weight", {d, kv_rows});
    layer.wv = reader.read_matrix(p + "attn_v.weight", {d, kv_rows});
    layer.bq = reader.read(p + "attn_q.bias", {q_rows}, !c.qkv_bias);
    layer.bk = reader.read(p + "attn_k.bias", {kv_rows}, !c.qkv_bias);
    layer.bv = reader.read(p + "attn_v.bias", {kv_rows}, !c.qkv_bias);
    layer.wo = reader.read_matrix(p + "attn_output.weight", {q_rows, d});
    layer.ffn_norm = reader.read(p + "ffn_norm.weight", {d});
    layer.w_gate = reader.read_matrix(p + "ffn_gate.weight", {d, ffn});
    layer.w_up = reader.read_matrix(p + "ffn_up.weight", {d, ffn});
    layer.w_down = reader.read_matrix(p + "ffn_down.weight", {ffn, d});
    if (permuted) {
      unpermute_rope_rows(layer.wq, c.n_query_heads, c.head_dim, c.d_model);
      unpermute_rope_rows(layer.wk, c.n_kv_heads, c.head_dim, c.d_model);
      if (!layer.bq.empty()) unpermute_rope_rows(layer.bq, c.n_query_heads, c.head_dim, 1);
      if (!layer.bk.empty()) unpermute_rope_rows(layer.bk, c.n_kv_heads, c.head_dim, 1);
    }
  }
  w->weight_dtypes = reader.dtypes();
  return w;
}

namespace {

// HF tensors are already [out, in] row-major with Q/K rows in rotate_half order: no reordering.
class HfWeightReader {
 public:
  HfWeightReader(const SafetensorsModel& model, std::string label, WeightFormat format)
      : model_(model), label_(std::move(label)), format_(format) {}

  // A weight matrix: f16/bf16 tensors keep their 16-bit values when the format asks for it.
  WeightMatrix read_matrix(const std::string& name, std::vector<int64_t> shape) {
    const SafetensorsFile* file = model_.file_of(name);
    const SafetensorsTensor* tensor = file ? file->find(name) : nullptr;
    const uint32_t type = tensor == nullptr         ? 0
                          : tensor->dtype == "F16"  ? 1
                          : tensor->dtype == "BF16" ? 30
                                                    : 0;
    if (format_ == WeightFormat::kF32 || type == 0 || tensor->shape != shape ||
        !kernels::stored_matmul_supported(type, shape.back()))
      return read(name, std::move(shape));  // f32, or the shape error
    ++counts_[tensor->dtype];
    const auto bytes = file->raw_bytes(*tensor);
    return WeightMatrix::encoded(type, {bytes.begin(), bytes.end()}, tensor->elements());
  }

  std::vector<float> read(const std::string& name, std::vector<int64_t> shape,
                          bool optional = false) {
    if (optional && !model_.has(name)) return {};
    std::vector<int64_t> actual;
    std::vector<float> data = model_.read_f32(name, &actual);
    if (actual != shape) {
      std::string want, got;
      for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      for (int64_t d : actual) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw FormatError(label_ + ": tensor '" + name + "' has shape [" + got +
                        "] but config.json implies [" + want + "]");
    }
    ++counts_[model_.file_of(name)->find(name)->dtype];
    return data;
  }

  std::string dtypes() const {
    std::vector<std::pair<std::string, int>> counts;
    for (const auto& [dtype, n] : counts_) {
      std::string lower = dtype;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      counts.emplace_back(lower, n);
    }
    return describe_dtype_counts(counts);
  }

 private:
  const SafetensorsModel& model_;
  std::string label_;
  WeightFormat format_;
  std::map<std::string, int> counts_;
};

}  // namespace

std::shared_ptr<ModelWeights> load_weights_from_hf_folder(const std::filesystem::path& folder,
                                                          WeightFormat format) {
  auto w = std::make_shared<ModelWeights>();
  w->config = model_config_from_hf_folder(folder);
  w->source = folder.string();
  const ModelConfig& c = w->config;
  const SafetensorsModel model = SafetensorsModel::open_folder(folder);
  const int64_t d = c.d_model, q_rows = int64_t{c.n_query_heads} * c.head_dim,
                kv_rows = int64_t{c.n_kv_heads} * c.head_dim, ffn = c.ffn_dim, vocab = c.vocab_size;
  HfWeightReader reader(model, folder.string(), format);
  w->token_embedding = reader.read_matrix("model.embed_tokens.weight", {vocab, d});
  w->output_norm = reader.read("model.norm.weight", {d});
  // Some tied checkpoints still ship lm_head.weight; a tied model ignores it, as transformers does.
  if (!c.tied_embeddings) w->output = reader.read_matrix("lm_head.weight", {vocab, d});
  w->layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& layer = w->layers[l];
    layer.attn_norm = reader.read(p + "input_layernorm.weight", {d});
    layer.wq = reader.read_matrix(p + "self_attn.q_proj.weight", {q_rows, d});
    layer.wk = reader.read_matrix(p + "self_attn.k_proj.weight", {kv_rows, d});
    layer.wv = reader.read_matrix(p + "self_attn.v_proj.weight", {kv_rows, d});
    if (c.qkv_bias) {
      layer.bq = reader.read(p + "self_attn.q_proj.bias", {q_rows});
      layer.bk = reader.read(p + "self_attn.k_proj.bias", {kv_rows});
      layer.bv = reader.read(p + "self_attn.v_proj.bias", {kv_rows});
    }
    layer.wo = reader.read_matrix(p + "self_attn.o_proj.weight", {d, q_rows});
    layer.ffn_norm = reader.read(p + "post_attention_layernorm.weight", {d});
    layer.w_gate = reader.read_matrix(p + "mlp.gate_proj.weight", {ffn, d});
    layer.w_up = reader.read_matrix(p + "mlp.up_proj.weight", {ffn, d});
    layer.w_down = reader.read_matrix(p + "mlp.down_proj.weight", {d, ffn});
  }
  w->weight_dtypes = reader.dtypes();
  return w;
}

}  // namespace kvb
