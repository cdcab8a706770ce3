#include "engine/model.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "engine/chat_template.h"
#include "engine/gguf.h"
#include "engine/hf_config.h"
#include "engine/presets.h"
#include "engine/safetensors.h"
#include "engine/sha256.h"
#include "engine/weight_source.h"
#include "engine/weights_loader.h"

namespace kvb {
namespace {

constexpr std::string_view kPresetPrefix = "preset:";

// For presets: token id = byte value (ids >= 256 are never produced), no special tokens but an EOS
// at id 0 so that generation loops terminate on a NUL byte.
class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(int vocab_size) : vocab_size_(vocab_size) {}
  std::vector<TokenId> encode(std::string_view text, bool add_bos, bool) const override {
    std::vector<TokenId> ids;
    if (add_bos) ids.push_back(bos_id());
    for (unsigned char c : text) ids.push_back(static_cast<TokenId>(c) % vocab_size_);
    return ids;
  }
  std::string decode(const std::vector<TokenId>& ids, bool) const override {
    std::string out;
    for (TokenId id : ids) out += token_text(id);
    return out;
  }
  std::string token_text(TokenId id) const override {
    return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
  }
  int vocab_size() const override { return vocab_size_; }
  TokenId bos_id() const override { return 1; }
  TokenId eos_id() const override { return 0; }
  bool is_end_of_generation(TokenId id) const override { return id == 0; }
  bool adds_bos_by_default() const override { return false; }
  std::string kind() const override { return "bytes (dummy preset)"; }

 private:
  int vocab_size_;
};

// What a device engine needs to find and describe the weights it reads itself (no tensors).
std::shared_ptr<ModelWeights> weights_metadata(const WeightSource& source) {
  auto weights = std::make_shared<ModelWeights>();
  weights->config = source.config();
  weights->source = source.label();
  weights->weight_dtypes = source.dtypes();
  return weights;
}

bool is_preset(const std::string& s) { return s.rfind(kPresetPrefix, 0) == 0; }

void require_exists(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(path.string() +
                     ": no such file or folder (give a .gguf file, an HF model folder, "
                     "or preset:NAME; the default model is fetched by harness/scripts/setup.sh)");
}

bool is_hf_folder(const std::filesystem::path& path) { return std::filesystem::is_directory(path); }

// tokenizer_config.json's chat_template: a string, or a list of {name, template} (the "default"
// one).
std::string hf_chat_template(const std::filesystem::path& folder) {
  std::ifstream in(folder / "tokenizer_config.json");
  if (!in) return "";
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("chat_template")) return "";
  const auto& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& entry : t)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
  return "";
}

std::string hf_tokenizer_kind(const std::filesystem::path& folder) {
  if (std::filesystem::exists(folder / "tokenizer.json")) {
    std::ifstream in(folder / "tokenizer.json");
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("model") && j["model"].is_object() &&
        j["model"].contains("type") && j["model"]["type"].is_string())
      return "tokenizer.json (" + j["model"]["type"].get<std::string>() + ")";
    return "tokenizer.json";
  }
  if (std::filesystem::exists(folder / "tokenizer.model")) return "tokenizer.model (sentencepiece)";
  return "none";
}

std::vector<std::filesystem::path> hf_hashed_files(const std::filesystem::path& folder,
                                                   const SafetensorsModel& model) {
  std::vector<std::filesystem::path> files = {folder / "config.json"};
  for (const auto& f : model.files()) files.push_back(f);
  return files;
}

}  // namespace

LoadedModel load_model(const std::string& path_or_preset, const LoadOptions& options) {
  LoadedModel model;
  if (is_preset(path_or_preset)) {
    const std::string name = path_or_preset.substr(kPresetPrefix.size());
    const ModelConfig config = preset_config(name);
    std::shared_ptr<ModelWeights> weights;
    if (options.weights_on_host) {
      weights = random_weights(config, kPresetSeed);
    } else {
      weights = std::make_shared<ModelWeights>();
      weights->config = config;
    }
    weights->source = path_or_preset;
    model.tokenizer = std::make_shared<ByteTokenizer>(config.vocab_size);
    model.chat_template = "plain";
    model.sha256 = sha256_hex(path_or_preset + " seed=" + std::to_string(kPresetSeed));
    model.weights = std::move(weights);
    return model;
  }
  const std::filesystem::path path(path_or_preset);
  require_exists(path);
  if (is_hf_folder(path)) {
    const auto source = hf_weight_source(path);
    model.weights = options.weights_on_host ? load_weights(*source, options.weight_format)
                                            : weights_metadata(*source);
    model.tokenizer = tokenizer_from_hf_folder(path.string());
    model.chat_template = chat_template_name_for(
        hf_chat_template(path), architecture_name(model.weights->config.architecture),
        model.weights->config.name);
    model.sha256 = sha256_hex_of_files(hf_hashed_files(path, SafetensorsModel::open_folder(path)));
    return model;
  }
  {
    // The mapping lives only inside this scope: weights are copies, the tokenizer copies strings.
    const auto gguf = GgufFile::open(path);
    const auto source = gguf_weight_source(*gguf);
    model.weights = options.weights_on_host ? load_weights(*source, options.weight_format)
                                            : weights_metadata(*source);
    model.tokenizer = tokenizer_from_gguf(*gguf);
    model.chat_template = chat_template_name_for(*gguf);
  }
  model.sha256 = sha256_hex_of_files({path});
  return model;
}

ModelSummary inspect_model(const std::string& path_or_preset) {
  ModelSummary s;
  s.source = path_or_preset;
  if (is_preset(path_or_preset)) {
    s.format = "preset";
    s.config = preset_config(path_or_preset.substr(kPresetPrefix.size()));
    s.tokenizer_kind = "bytes (dummy preset)";
    s.chat_template = "plain";
    const ModelConfig& c = s.config;
    const int64_t d = c.d_model, q = int64_t{c.n_query_heads} * c.head_dim,
                  kv = int64_t{c.n_kv_heads} * c.head_dim;
    const int64_t per_layer =
        2 * d + 2 * d * q + 2 * d * kv + 3 * d * c.ffn_dim + (c.qkv_bias ? q + 2 * kv : 0);
    s.n_parameters =
        c.n_layers * per_layer + d + int64_t{c.vocab_size} * d * (c.tied_embeddings ? 1 : 2);
    s.dtype_counts["f32 (random)"] =
        static_cast<int>(c.n_layers * (c.qkv_bias ? 12 : 9) + (c.tied_embeddings ? 2 : 3));
    return s;
  }
  const std::filesystem::path path(path_or_preset);
  require_exists(path);
  if (is_hf_folder(path)) {
    s.format = "hf-safetensors";
    s.config = model_config_from_hf_folder(path);
    const SafetensorsModel model = SafetensorsModel::open_folder(path);
    try {
      s.tokenizer_kind =
          tokenizer_from_hf_folder(path.string())->kind() + " from " + hf_tokenizer_kind(path);
    } catch (const std::exception& e) {
      s.tokenizer_kind = std::string("unusable: ") + e.what();
    }
    s.chat_template = chat_template_name_for(
        hf_chat_template(path), architecture_name(s.config.architecture), s.config.name);
    for (const auto& [dtype, n] : model.dtype_counts()) {
      std::string lower = dtype;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      s.dtype_counts[lower] = n;
    }
    s.n_parameters = model.total_elements();
    for (const auto& f : hf_hashed_files(path, model))
      s.file_bytes += std::filesystem::file_size(f);
    return s;
  }
  const auto gguf = GgufFile::open(path);
  s.format = "gguf";
  s.config = model_config_from_gguf(*gguf);
  try {
    s.tokenizer_kind = tokenizer_from_gguf(*gguf)->kind();
  } catch (const std::exception& e) {
    s.tokenizer_kind = std::string("unusable: ") + e.what();
  }
  s.chat_template = chat_template_name_for(*gguf);
  for (const GgufTensorInfo& t : gguf->tensors()) {
    ++s.dtype_counts[ggml_type_name(t.type)];
    s.n_parameters += t.elements();
  }
  s.file_bytes = std::filesystem::file_size(path);
  return s;
}

}  // namespace kvb
