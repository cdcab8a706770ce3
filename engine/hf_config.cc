// Defaults follow the transformers config classes (LlamaConfig, MistralConfig, Qwen2Config): a
// field absent from config.json takes the class default, as transformers itself would.
#include "engine/hf_config.h"

#include <cmath>
#include <fstream>

#include "common/errors.h"

namespace kvb {
namespace {

class Fields {
 public:
  Fields(const nlohmann::json& j, const std::string& label) : j_(j), label_(label) {}

  bool present(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  int positive_int(const char* key, int64_t limit) const {
    if (!present(key)) throw FormatError(label_ + ": field '" + key + "' is missing");
    return positive_int_value(j_[key], key, limit);
  }
  int positive_int(const char* key, int64_t limit, int fallback) const {
    return present(key) ? positive_int(key, limit) : fallback;
  }
  int positive_int_value(const nlohmann::json& v, const std::string& key, int64_t limit) const {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > limit)
      throw FormatError(label_ + ": field '" + key + "' must be an integer in 1.." +
                        std::to_string(limit));
    return static_cast<int>(v.get<int64_t>());
  }
  double number(const nlohmann::json& obj, const std::string& key, double fallback) const {
    if (!obj.contains(key) || obj[key].is_null()) return fallback;
    if (!obj[key].is_number()) throw FormatError(label_ + ": field '" + key + "' must be a number");
    return obj[key].get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!present(key)) return fallback;
    if (!j_[key].is_boolean())
      throw FormatError(label_ + ": field '" + key + "' must be true or false");
    return j_[key].get<bool>();
  }

 private:
  const nlohmann::json& j_;
  const std::string& label_;
};

}  // namespace

ModelConfig model_config_from_hf_json(const nlohmann::json& j, const std::string& label) {
  if (!j.is_object()) throw FormatError(label + ": config is not a JSON object");
  std::string arch_name;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch_name = j["architectures"][0].get<std::string>();
  else if (j.contains("model_type") && j["model_type"].is_string())
    arch_name = j["model_type"].get<std::string>();
  ModelConfig c;
  if (arch_name == "LlamaForCausalLM" || arch_name == "llama") {
    c.architecture = Architecture::kLlama;
  } else if (arch_name == "MistralForCausalLM" || arch_name == "mistral") {
    c.architecture = Architecture::kMistral;
  } else if (arch_name == "Qwen2ForCausalLM" || arch_name == "qwen2") {
    c.architecture = Architecture::kQwen2;
  } else {
    throw InputError(
        label + ": architecture '" + arch_name +
        "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)");
  }
  const Fields f(j, label);
  constexpr int64_t kMaxDim = 1 << 20;
  c.d_model = f.positive_int("hidden_size", kMaxDim);
  c.ffn_dim = f.positive_int("intermediate_size", kMaxDim);
  c.n_layers = f.positive_int("num_hidden_layers", 1024);
  c.n_query_heads = f.positive_int("num_attention_heads", 4096);
  c.n_kv_heads = f.positive_int("num_key_value_heads", 4096, c.n_query_heads);
  if (c.n_query_heads % c.n_kv_heads != 0)
    throw FormatError(label + ": num_attention_heads " + std::to_string(c.n_query_heads) +
                      " is not a multiple of num_key_value_heads " + std::to_string(c.n_kv_heads));
  if (!f.present("head_dim") && c.d_model % c.n_query_heads != 0)
    throw FormatError(
        label + ": hidden_size is not a multiple of num_attention_heads and head_dim is absent");
  c.head_dim = f.positive_int("head_dim", 4096, c.d_model / c.n_query_heads);
  if (c.head_dim % 2 != 0)
    throw FormatError(label + ": head_dim " + std::to_string(c.head_dim) +
                      " is odd (RoPE needs pairs)");
  c.vocab_size = f.positive_int("vocab_size", int64_t{1} << 24);
  c.max_context = f.positive_int("max_position_embeddings", int64_t{1} << 24, 2048);
  c.rms_norm_eps = static_cast<float>(f.number(j, "rms_norm_eps", 1e-6));
  c.rope_theta = static_cast<float>(f.number(j, "rope_theta", 10000.0));
  // Accepted values must give finite activations: a RoPE base <= 0 or a negative epsilon makes
  // every logit NaN without an error.
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    throw FormatError(label + ": field 'rope_theta' must be a finite number > 0, not " +
                      j["rope_theta"].dump());
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps >= 0))
    throw FormatError(label + ": field 'rms_norm_eps' must be a finite number >= 0, not " +
                      j["rms_norm_eps"].dump());
  c.tied_embeddings = f.boolean("tie_word_embeddings", false);
  c.qkv_bias = c.architecture == Architecture::kQwen2 || f.boolean("attention_bias", false);
  // Mistral v0.1 attends within a sliding window; without it we are exact only up to the window.
  if (c.architecture == Architecture::kMistral && f.present("sliding_window"))
    c.max_context = std::min(c.max_context, f.positive_int("sliding_window", int64_t{1} << 24));

  if (f.present("rope_scaling")) {
    const auto& s = j["rope_scaling"];
    if (!s.is_object())
      throw FormatError(label + ": field 'rope_scaling' must be an object or null");
    std::string type;
    if (s.contains("rope_type") && s["rope_type"].is_string())
      type = s["rope_type"].get<std::string>();
    else if (s.contains("type") && s["type"].is_string())
      type = s["type"].get<std::string>();
    if (type == "llama3") {
      Llama3RopeScaling r;
      r.factor = static_cast<float>(f.number(s, "factor", r.factor));
      r.low_freq_factor = static_cast<float>(f.number(s, "low_freq_factor", r.low_freq_factor));
      r.high_freq_factor = static_cast<float>(f.number(s, "high_freq_factor", r.high_freq_factor));
      if (s.contains("original_max_position_embeddings"))
        r.original_max_position =
            f.positive_int_value(s["original_max_position_embeddings"],
                                 "rope_scaling.original_max_position_embeddings", int64_t{1} << 24);
      if (!std::isfinite(r.factor) || !std::isfinite(r.low_freq_factor) ||
          !std::isfinite(r.high_freq_factor) || r.factor <= 0 || r.low_freq_factor <= 0 ||
          r.high_freq_factor <= r.low_freq_factor)
        throw FormatError(label +
                          ": rope_scaling needs finite factors, factor > 0 and "
                          "high_freq_factor > low_freq_factor > 0");
      c.llama3_rope_scaling = r;
    } else if (type != "default") {
      throw InputError(label + ": rope_scaling type '" + type +
                       "' is not supported (supported: llama3)");
    }
  }
  return c;
}

ModelConfig model_config_from_hf_folder(const std::filesystem::path& folder) {
  const auto path = folder / "config.json";
  std::ifstream in(path);
  if (!in) throw InputError(path.string() + ": missing (an HF model folder needs config.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path.string() + ": not valid JSON: " + e.what());
  }
  ModelConfig c = model_config_from_hf_json(j, path.string());
  c.name = std::filesystem::absolute(folder).lexically_normal().filename().string();
  if (c.name.empty())
    c.name = std::filesystem::absolute(folder).lexically_normal().parent_path().filename().string();
  return c;
}

}  // namespace kvb
