// Model weights for the CPU engine, loaded from a GGUF file, an HF folder (config.json +
// *.safetensors) or a dummy preset (random weights with a paper model's shapes). Linear weights
// are WeightMatrix (engine/weight_matrix.h), row-major [out, in] (y = W x), in the file's encoding
// (GGUF blocks, f16, bf16) or in f32 (WeightFormat::kF32, presets); norms and biases are f32.
//
// RoPE layout (read this before applying RoPE): for EVERY source (GGUF of any architecture, HF
// safetensors, presets) the rows of wq/wk (and bq/bk) are in the HF transformers order, the one
// `rotate_half` expects ("NeoX style"): within each head of head_dim rows, RoPE rotates the pair
// (i, i + head_dim/2) by angle pos * rope_theta^(-2i/head_dim), i < head_dim/2:
//   q'[i]          = q[i] cos - q[i + head_dim/2] sin
//   q'[i + hd/2]   = q[i + head_dim/2] cos + q[i] sin
// (with llama3_rope_scaling applied to the frequencies when set). llama.cpp's converter permutes
// the Q/K rows of Llama-architecture GGUFs into adjacent-pair (GPT-J, "interleaved") order; the
// GGUF loader undoes that permutation (weights_loader.h: unpermute_rope_rows), so do NOT use
// adjacent-pair RoPE on these weights. Qwen2 GGUFs are stored unpermuted and need no change.
// Accordingly every loader leaves ModelConfig::rope_interleaved_pairs = false.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/weight_matrix.h"

namespace kvb {

struct LayerWeights {
  std::vector<float> attn_norm;   // [d_model]
  WeightMatrix wq;                // [Hq*d, d_model]
  WeightMatrix wk;                // [Hkv*d, d_model]
  WeightMatrix wv;                // [Hkv*d, d_model]
  std::vector<float> bq, bk, bv;  // QKV bias (Qwen2) or empty
  WeightMatrix wo;                // [d_model, Hq*d]
  std::vector<float> ffn_norm;    // [d_model]
  WeightMatrix w_gate;            // [ffn, d_model]
  WeightMatrix w_up;              // [ffn, d_model]
  WeightMatrix w_down;            // [d_model, ffn]
};

struct ModelWeights {
  ModelConfig config;
  WeightMatrix token_embedding;    // [vocab, d_model]
  std::vector<float> output_norm;  // [d_model]
  WeightMatrix output;             // [vocab, d_model]; empty when tied to the embedding
  std::vector<LayerWeights> layers;
  std::string source;         // file path or "preset:<name>"
  std::string weight_dtypes;  // e.g. "q4_1 x 210, f32 x 61" as stored in the file

  const WeightMatrix& output_matrix() const { return output.empty() ? token_embedding : output; }
};

}  // namespace kvb
