// HF transformers config.json -> ModelConfig for LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM (incl. rope_scaling "llama3", tie_word_embeddings, Qwen2's QKV bias).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/model_config.h"

namespace kvb {

// `label` names the source in errors (usually the config.json path). Unsupported architectures
// and RoPE scalings are InputErrors; missing or mistyped fields are FormatErrors naming the field.
ModelConfig model_config_from_hf_json(const nlohmann::json& config, const std::string& label);
ModelConfig model_config_from_hf_folder(const std::filesystem::path& folder);

}  // namespace kvb
