// GGUF / HF folder -> ModelWeights through the tensor mapping of engine/weight_source.h; here also
// the GGUF config (rope_freqs: Llama-3.x frequency factors) and the dequantisation helpers.
#include "engine/weights_loader.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/errors.h"
#include "engine/hf_config.h"
#include "engine/weight_source.h"
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

void unpermute_rope_rows(std::vector<float>& rows, int n_heads, int head_dim, int row_len) {
  const size_t head_size = static_cast<size_t>(head_dim) * row_len;
  std::vector<float> head(head_size);
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* base = rows.data() + h * head_size;
    for (int i = 0; i < half; ++i)
      for (int j = 0; j < 2; ++j)
        std::copy_n(base + (2 * i + j) * static_cast<size_t>(row_len), row_len,
                    head.data() + (j * half + i) * static_cast<size_t>(row_len));
    std::copy(head.begin(), head.end(), base);
  }
}

namespace {

// Where a tensor goes in ModelWeights: a weight matrix, or an f32 vector (a norm or a bias).
struct HostSlot {
  WeightMatrix* matrix = nullptr;
  std::vector<float>* vector = nullptr;
};

// One line per case: the table reads at a glance.
// clang-format off
HostSlot host_slot(ModelWeights& w, const WeightTensor& t) {
  if (t.layer < 0) {
    if (t.role == WeightRole::kTokenEmbedding) return {.matrix = &w.token_embedding};
    if (t.role == WeightRole::kOutput) return {.matrix = &w.output};
    return {.vector = &w.output_norm};
  }
  LayerWeights& layer = w.layers.at(t.layer);
  switch (t.role) {
    case WeightRole::kAttnNorm: return {.vector = &layer.attn_norm};
    case WeightRole::kWq: return {.matrix = &layer.wq};
    case WeightRole::kWk: return {.matrix = &layer.wk};
    case WeightRole::kWv: return {.matrix = &layer.wv};
    case WeightRole::kBq: return {.vector = &layer.bq};
    case WeightRole::kBk: return {.vector = &layer.bk};
    case WeightRole::kBv: return {.vector = &layer.bv};
    case WeightRole::kWo: return {.matrix = &layer.wo};
    case WeightRole::kFfnNorm: return {.vector = &layer.ffn_norm};
    case WeightRole::kWGate: return {.matrix = &layer.w_gate};
    case WeightRole::kWUp: return {.matrix = &layer.w_up};
    case WeightRole::kWDown: return {.matrix = &layer.w_down};
    default: break;
  }
  throw std::logic_error("host_slot: model-level role " + t.name + " given a layer");
}
// clang-format on

std::vector<float> read_f32(const WeightSource& source, const WeightTensor& t) {
  std::vector<float> values(static_cast<size_t>(t.elements()));
  source.read_rows(t, 0, t.rows, values.data());
  return values;
}

// A weight matrix: its stored blocks (f16, bf16, GGUF blocks) when the format asks for them and
// the matrix kernels compute on them (rows of whole blocks), else decoded to f32.
WeightMatrix read_matrix(const WeightSource& source, const WeightTensor& t, WeightFormat format) {
  if (format == WeightFormat::kAsStored && t.stored_type != 0 &&
      kernels::stored_matmul_supported(t.stored_type, t.cols)) {
    std::vector<uint8_t> bytes(static_cast<size_t>(t.rows * source.stored_row_bytes(t)));
    source.read_stored_rows(t, 0, t.rows, bytes.data());
    return WeightMatrix::encoded(t.stored_type, std::move(bytes), t.elements());
  }
  return read_f32(source, t);
}

}  // namespace

std::shared_ptr<ModelWeights> load_weights(const WeightSource& source, WeightFormat format) {
  auto w = std::make_shared<ModelWeights>();
  w->config = source.config();
  w->source = source.label();
  w->layers.resize(w->config.n_layers);
  for (const WeightTensor& t : source.tensors()) {
    const HostSlot slot = host_slot(*w, t);
    if (slot.matrix != nullptr)
      *slot.matrix = read_matrix(source, t, format);
    else
      *slot.vector = read_f32(source, t);
    source.release(t);  // the copy is what stays resident, not also the file's pages
  }
  w->weight_dtypes = source.dtypes();
  return w;
}

std::shared_ptr<ModelWeights> load_weights_from_gguf(const GgufFile& gguf, WeightFormat format) {
  return load_weights(*gguf_weight_source(gguf), format);
}

std::shared_ptr<ModelWeights> load_weights_from_hf_folder(const std::filesystem::path& folder,
                                                          WeightFormat format) {
  return load_weights(*hf_weight_source(folder), format);
}

}  // namespace kvb
