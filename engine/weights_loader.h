// Loading ModelWeights (engine/weights.h) from model files: a GGUF file or an HF folder
// (config.json + *.safetensors), through the tensor mapping of engine/weight_source.h. Weight
// matrices keep the file's encoding (WeightFormat::kAsStored) or are dequantised to f32 (kF32);
// norms and biases are always f32. Shapes are checked against the config; a tensor that is missing
// or has the wrong shape is a FormatError naming the file and the tensor.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/model_config.h"
#include "engine/weight_source.h"
#include "engine/weights.h"

namespace kvb {

// The ModelConfig described by a GGUF file's metadata (general.architecture = llama, mistral or
// qwen2; anything else is an InputError naming the architecture and the supported ones).
ModelConfig model_config_from_gguf(const GgufFile& gguf);

// Every weight of `source` (engine/weight_source.h: the name mapping and RoPE row order), weight
// matrices in `format`; each tensor's file pages leave the resident set once copied.
std::shared_ptr<ModelWeights> load_weights(const WeightSource& source,
                                           WeightFormat format = WeightFormat::kAsStored);

// Every weight of a GGUF model, RoPE rows in the layout documented in engine/weights.h.
std::shared_ptr<ModelWeights> load_weights_from_gguf(const GgufFile& gguf,
                                                     WeightFormat format = WeightFormat::kAsStored);

// Every weight of an HF folder (config.json, model.safetensors or a sharded index).
std::shared_ptr<ModelWeights> load_weights_from_hf_folder(
    const std::filesystem::path& folder, WeightFormat format = WeightFormat::kAsStored);

// One GGUF tensor decoded to f32 in ggml order (ne[0] fastest).
std::vector<float> dequantize_tensor(const GgufFile& gguf, const GgufTensorInfo& info);

// llama.cpp's HF->GGUF conversion of Llama-family Q/K weights reorders the rows of every head so
// that RoPE rotates adjacent pairs (2i, 2i+1). This undoes it: row 2i+j of a head goes back to HF
// row j*head_dim/2 + i, where RoPE rotates the pair (i, i + head_dim/2). `row_len` is 1 for a bias.
void unpermute_rope_rows(std::vector<float>& rows, int n_heads, int head_dim, int row_len);

// "q4_1 x 210, f32 x 61, q8_0 x 1": counts per dtype, most frequent first.
std::string describe_dtype_counts(const std::vector<std::pair<std::string, int>>& counts);

}  // namespace kvb
