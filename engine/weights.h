// Model weights in f32 for the CPU engine, loaded from a GGUF file (dequantised at load), an HF
// folder (config.json + *.safetensors) or a dummy preset (random weights with a paper model's
// shapes). Linear weights are stored row-major as [out, in]: y = W x.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_config.h"

namespace kvb {

struct LayerWeights {
  std::vector<float> attn_norm;  // [d_model]
  std::vector<float> wq;         // [Hq*d, d_model]
  std::vector<float> wk;         // [Hkv*d, d_model]
  std::vector<float> wv;         // [Hkv*d, d_model]
  std::vector<float> bq, bk, bv; // QKV bias (Qwen2) or empty
  std::vector<float> wo;         // [d_model, Hq*d]
  std::vector<float> ffn_norm;   // [d_model]
  std::vector<float> w_gate;     // [ffn, d_model]
  std::vector<float> w_up;       // [ffn, d_model]
  std::vector<float> w_down;     // [d_model, ffn]
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> token_embedding;  // [vocab, d_model]
  std::vector<float> output_norm;      // [d_model]
  std::vector<float> output;           // [vocab, d_model]; empty when tied to the embedding
  std::vector<LayerWeights> layers;
  std::string source;                  // file path or "preset:<name>"
  std::string weight_dtypes;           // e.g. "q4_1 x 210, f32 x 61" as stored in the file

  const std::vector<float>& output_matrix() const { return output.empty() ? token_embedding : output; }
};

}  // namespace kvb
