// GGUF tensor names follow llama.cpp (src/llama-arch.cpp): token_embd, blk.N.attn_q, attn_k,
// attn_v, attn_output, attn_norm, ffn_gate, ffn_up, ffn_down, ffn_norm, output_norm, output
// (absent = tied to token_embd). HF names follow transformers' Llama/Mistral/Qwen2 modules.
#include "engine/weight_source.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <stdexcept>

#include "common/errors.h"
#include "engine/hf_config.h"
#include "engine/safetensors.h"
#include "engine/weights_loader.h"
#include "kernels/cpu/dequantize.h"

namespace kvb {
namespace {

// One engine tensor and its name in each format (the layer prefix "blk.N." / "model.layers.N."
// comes in front of the per-layer names).
struct TensorName {
  WeightRole role;
  const char* gguf;
  const char* hf;
};

constexpr TensorName kModelTensors[] = {
    {WeightRole::kTokenEmbedding, "token_embd.weight", "model.embed_tokens.weight"},
    {WeightRole::kOutputNorm, "output_norm.weight", "model.norm.weight"},
    {WeightRole::kOutput, "output.weight", "lm_head.weight"},
};

constexpr TensorName kLayerTensors[] = {
    {WeightRole::kAttnNorm, "attn_norm.weight", "input_layernorm.weight"},
    {WeightRole::kWq, "attn_q.weight", "self_attn.q_proj.weight"},
    {WeightRole::kWk, "attn_k.weight", "self_attn.k_proj.weight"},
    {WeightRole::kWv, "attn_v.weight", "self_attn.v_proj.weight"},
    {WeightRole::kBq, "attn_q.bias", "self_attn.q_proj.bias"},
    {WeightRole::kBk, "attn_k.bias", "self_attn.k_proj.bias"},
    {WeightRole::kBv, "attn_v.bias", "self_attn.v_proj.bias"},
    {WeightRole::kWo, "attn_output.weight", "self_attn.o_proj.weight"},
    {WeightRole::kFfnNorm, "ffn_norm.weight", "post_attention_layernorm.weight"},
    {WeightRole::kWGate, "ffn_gate.weight", "mlp.gate_proj.weight"},
    {WeightRole::kWUp, "ffn_up.weight", "mlp.up_proj.weight"},
    {WeightRole::kWDown, "ffn_down.weight", "mlp.down_proj.weight"},
};

// The engine's [rows, cols] of a role (cols = 1 for a vector).
// One line per case: the table reads at a glance.
// clang-format off
std::pair<int64_t, int64_t> engine_shape(WeightRole role, const ModelConfig& c) {
  const int64_t d = c.d_model, q = int64_t{c.n_query_heads} * c.head_dim,
                kv = int64_t{c.n_kv_heads} * c.head_dim, ffn = c.ffn_dim, vocab = c.vocab_size;
  switch (role) {
    case WeightRole::kTokenEmbedding:
    case WeightRole::kOutput: return {vocab, d};
    case WeightRole::kOutputNorm:
    case WeightRole::kAttnNorm:
    case WeightRole::kFfnNorm: return {d, 1};
    case WeightRole::kWq: return {q, d};
    case WeightRole::kWk:
    case WeightRole::kWv: return {kv, d};
    case WeightRole::kBq: return {q, 1};
    case WeightRole::kBk:
    case WeightRole::kBv: return {kv, 1};
    case WeightRole::kWo: return {d, q};
    case WeightRole::kWGate:
    case WeightRole::kWUp: return {ffn, d};
    case WeightRole::kWDown: return {d, ffn};
  }
  return {0, 0};
}
// clang-format on

bool is_bias(WeightRole role) {
  return role == WeightRole::kBq || role == WeightRole::kBk || role == WeightRole::kBv;
}

// Whether the file must hold the tensor for this config (the output matrix exists only untied,
// the QKV biases only with qkv_bias); a tied checkpoint's lm_head.weight is ignored, as in
// transformers.
bool expected(WeightRole role, const ModelConfig& c) {
  if (role == WeightRole::kOutput) return !c.tied_embeddings;
  if (is_bias(role)) return c.qkv_bias;
  return true;
}

// Calls fn(name, layer) for every tensor the config implies, in load order.
template <typename Fn>
void for_each_expected(const ModelConfig& c, Fn fn) {
  for (const TensorName& n : kModelTensors)
    if (expected(n.role, c)) fn(n, -1);
  for (int layer = 0; layer < c.n_layers; ++layer)
    for (const TensorName& n : kLayerTensors)
      if (expected(n.role, c)) fn(n, layer);
}

std::string show_shape(const std::vector<int64_t>& shape) {
  std::string out;
  for (int64_t d : shape) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "[" + out + "]";
}

// llama.cpp's converter permutes the Q/K rows (and biases) of Llama-architecture GGUFs (Mistral is
// converted by the same class); Qwen2 GGUFs are not permuted (llama.cpp runs them NeoX-style).
int gguf_rope_heads(WeightRole role, const ModelConfig& c) {
  if (c.architecture == Architecture::kQwen2) return 0;
  if (role == WeightRole::kWq || role == WeightRole::kBq) return c.n_query_heads;
  if (role == WeightRole::kWk || role == WeightRole::kBk) return c.n_kv_heads;
  return 0;
}

class GgufWeightSource final : public WeightSource {
 public:
  GgufWeightSource(const GgufFile& gguf, std::shared_ptr<const GgufFile> owned)
      : WeightSource(config_for(gguf), gguf.label(), gguf.file_mapped()),
        gguf_(gguf),
        owned_(std::move(owned)) {
    for_each_expected(config(), [&](const TensorName& n, int layer) { add_tensor(n, layer); });
  }

 private:
  static ModelConfig config_for(const GgufFile& gguf) {
    ModelConfig c = model_config_from_gguf(gguf);
    c.rope_interleaved_pairs = false;  // after un-permuting, every loaded model pairs (i, i + hd/2)
    return c;
  }

  void add_tensor(const TensorName& n, int layer) {
    WeightTensor t;
    t.role = n.role;
    t.layer = layer;
    t.name = (layer < 0 ? "" : "blk." + std::to_string(layer) + ".") + n.gguf;
    std::tie(t.rows, t.cols) = engine_shape(n.role, config());
    const GgufTensorInfo* info = gguf_.tensor(t.name);
    if (info == nullptr) throw FormatError(label() + ": tensor '" + t.name + "' is missing");
    // ggml order: ne[0] (the engine's cols) first.
    const std::vector<int64_t> want =
        t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.cols, t.rows};
    if (info->shape != want)
      throw FormatError(label() + ": tensor '" + t.name + "' has shape " + show_shape(info->shape) +
                        " but the metadata implies " + show_shape(want));
    if (!dequantize_supported(info->type))
      dequantize_tensor(gguf_, *info);  // throws the FormatError listing the supported types
    t.stored_type = info->type;
    t.rope_heads = gguf_rope_heads(n.role, config());
    infos_.push_back(info);
    add(std::move(t));
  }

  std::span<const uint8_t> stored_bytes(const WeightTensor& tensor) const override {
    const auto it = std::find_if(infos_.begin(), infos_.end(),
                                 [&](const GgufTensorInfo* i) { return i->name == tensor.name; });
    return gguf_.tensor_bytes(**it);
  }

  const GgufFile& gguf_;
  std::shared_ptr<const GgufFile> owned_;
  std::vector<const GgufTensorInfo*> infos_;
};

WeightTensor hf_tensor(const TensorName& n, int layer, const ModelConfig& c) {
  WeightTensor t;
  t.role = n.role;
  t.layer = layer;
  t.name = (layer < 0 ? "" : "model.layers." + std::to_string(layer) + ".") + n.hf;
  std::tie(t.rows, t.cols) = engine_shape(n.role, c);
  return t;
}

uint32_t ggml_type_of_safetensors(const std::string& label, const SafetensorsTensor& t) {
  if (t.dtype == "F32") return static_cast<uint32_t>(GgmlType::kF32);
  if (t.dtype == "F16") return static_cast<uint32_t>(GgmlType::kF16);
  if (t.dtype == "BF16") return static_cast<uint32_t>(GgmlType::kBF16);
  throw FormatError(label + ": tensor '" + t.name + "' has dtype " + t.dtype +
                    "; model weights must be F32, F16 or BF16");
}

class HfWeightSource final : public WeightSource {
 public:
  explicit HfWeightSource(const std::filesystem::path& folder)
      : WeightSource(model_config_from_hf_folder(folder), folder.string(), true),
        model_(SafetensorsModel::open_folder(folder)) {
    for_each_expected(config(), [&](const TensorName& n, int layer) { add_tensor(n, layer); });
  }

 private:
  void add_tensor(const TensorName& n, int layer) {
    WeightTensor t = hf_tensor(n, layer, config());
    const SafetensorsFile* file = model_.file_of(t.name);
    if (file == nullptr)
      throw FormatError(label() + ": tensor '" + t.name +
                        "' is missing from the safetensors files");
    const SafetensorsTensor* stored = file->find(t.name);
    // HF tensors are already [out, in] with Q/K rows in rotate_half order: no reordering.
    const std::vector<int64_t> want =
        t.cols == 1 ? std::vector<int64_t>{t.rows} : std::vector<int64_t>{t.rows, t.cols};
    if (stored->shape != want)
      throw FormatError(label() + ": tensor '" + t.name + "' has shape " +
                        show_shape(stored->shape) + " but config.json implies " + show_shape(want));
    t.stored_type = ggml_type_of_safetensors(file->label(), *stored);
    stored_.push_back({file, stored});
    add(std::move(t));
  }

  std::span<const uint8_t> stored_bytes(const WeightTensor& tensor) const override {
    const auto it = std::find_if(stored_.begin(), stored_.end(),
                                 [&](const auto& s) { return s.second->name == tensor.name; });
    return it->first->raw_bytes(*it->second);
  }

  SafetensorsModel model_;
  std::vector<std::pair<const SafetensorsFile*, const SafetensorsTensor*>> stored_;
};

// madvise on the whole pages inside `bytes` of a private read-only file mapping. DONTNEED drops
// them from the resident set (they would fault back in from the file); WILLNEED starts readahead.
void advise_pages(std::span<const uint8_t> bytes, int advice) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(bytes.data());
  // Readahead may round outwards; a drop only covers pages wholly inside the range.
  const bool outwards = advice == MADV_WILLNEED;
  const uintptr_t begin = (first + (outwards ? 0 : page - 1)) / page * page;
  const uintptr_t end = (first + bytes.size() + (outwards ? page - 1 : 0)) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

std::string WeightSource::dtypes() const {
  std::map<std::string, int> counts;
  for (const WeightTensor& t : tensors_) ++counts[ggml_type_name(t.stored_type)];
  return describe_dtype_counts(
      std::vector<std::pair<std::string, int>>(counts.begin(), counts.end()));
}

int64_t WeightSource::total_elements() const {
  int64_t total = 0;
  for (const WeightTensor& t : tensors_) total += t.elements();
  return total;
}

std::span<const uint8_t> WeightSource::stored_row(std::span<const uint8_t> all,
                                                  const WeightTensor& tensor, int64_t engine_row) {
  const size_t row_bytes = all.size() / static_cast<size_t>(tensor.rows);
  int64_t row = engine_row;
  if (tensor.rope_heads > 0) {
    // Engine row j*half + i of a head was stored as row 2i + j (weights_loader.h).
    const int64_t head_dim = tensor.rows / tensor.rope_heads, half = head_dim / 2;
    const int64_t head = engine_row / head_dim, within = engine_row % head_dim;
    row = head * head_dim + 2 * (within % half) + within / half;
  }
  return all.subspan(static_cast<size_t>(row) * row_bytes, row_bytes);
}

void WeightSource::read_rows(const WeightTensor& tensor, int64_t first_row, int64_t rows,
                             float* out) const {
  const std::span<const uint8_t> all = stored_bytes(tensor);
  if (tensor.rope_heads == 0) {  // contiguous: one call (dequantize splits it across threads)
    const auto first = stored_row(all, tensor, first_row);
    dequantize(tensor.stored_type, first.data(), out, rows * tensor.cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    dequantize(tensor.stored_type, stored_row(all, tensor, first_row + r).data(),
               out + r * tensor.cols, tensor.cols);
}

void WeightSource::read_rows_bf16(const WeightTensor& tensor, int64_t first_row, int64_t rows,
                                  uint16_t* out) const {
  if (tensor.stored_type == static_cast<uint32_t>(GgmlType::kBF16)) {
    const std::span<const uint8_t> all = stored_bytes(tensor);
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = stored_row(all, tensor, first_row + r);
      std::memcpy(out + r * tensor.cols, row.data(), row.size());
    }
    return;
  }
  std::vector<float> f32(static_cast<size_t>(rows * tensor.cols));
  read_rows(tensor, first_row, rows, f32.data());
  for (size_t i = 0; i < f32.size(); ++i) out[i] = f32_to_bf16(f32[i]);
}

int64_t WeightSource::stored_row_bytes(const WeightTensor& tensor) const {
  return static_cast<int64_t>(stored_bytes(tensor).size()) / tensor.rows;
}

void WeightSource::read_stored_rows(const WeightTensor& tensor, int64_t first_row, int64_t rows,
                                    uint8_t* out) const {
  if (first_row < 0 || rows < 0 || first_row + rows > tensor.rows)
    throw std::logic_error("WeightSource::read_stored_rows: rows outside " + tensor.name);
  const std::span<const uint8_t> all = stored_bytes(tensor);
  const size_t row_bytes = all.size() / static_cast<size_t>(tensor.rows);
  if (tensor.rope_heads == 0) {  // contiguous: one copy
    std::memcpy(out, all.data() + first_row * row_bytes, rows * row_bytes);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * row_bytes, stored_row(all, tensor, first_row + r).data(), row_bytes);
}

void WeightSource::prefetch(const WeightTensor& tensor) const {
  if (file_mapped_) advise_pages(stored_bytes(tensor), MADV_WILLNEED);
}

void WeightSource::release(const WeightTensor& tensor, int64_t first_row, int64_t rows) const {
  if (!file_mapped_) return;
  if (rows < 0) rows = tensor.rows - first_row;
  const bool whole = first_row == 0 && rows == tensor.rows;
  if (tensor.rope_heads > 0 && !whole) return;
  const std::span<const uint8_t> all = stored_bytes(tensor);
  const size_t row_bytes = all.size() / static_cast<size_t>(tensor.rows);
  advise_pages(all.subspan(first_row * row_bytes, rows * row_bytes), MADV_DONTNEED);
}

std::unique_ptr<WeightSource> gguf_weight_source(const GgufFile& gguf) {
  return std::make_unique<GgufWeightSource>(gguf, nullptr);
}

std::unique_ptr<WeightSource> hf_weight_source(const std::filesystem::path& folder) {
  return std::make_unique<HfWeightSource>(folder);
}

std::vector<WeightTensor> hf_tensor_layout(const ModelConfig& config) {
  std::vector<WeightTensor> layout;
  for_each_expected(config, [&](const TensorName& n, int layer) {
    layout.push_back(hf_tensor(n, layer, config));
  });
  return layout;
}

std::unique_ptr<WeightSource> open_weight_source(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) return hf_weight_source(path);
  std::shared_ptr<const GgufFile> gguf = GgufFile::open(path);
  const GgufFile& file = *gguf;
  return std::make_unique<GgufWeightSource>(file, std::move(gguf));
}

}  // namespace kvb
