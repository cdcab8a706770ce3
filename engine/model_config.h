// Model shapes as data. One ModelConfig describes any supported architecture (Llama family,
// Mistral, Qwen2/2.5); presets give the exact shapes of the paper models for dummy-weight runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvb {

enum class Architecture { kLlama, kMistral, kQwen2 };

// Llama-3.x "llama3" RoPE frequency scaling (rope_scaling.rope_type == "llama3").
struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

struct ModelConfig {
  std::string name;  // e.g. "SmolLM2-135M-Instruct", "llama-3.1-8b (dummy)"
  Architecture architecture = Architecture::kLlama;
  int n_layers = 0;
  int d_model = 0;
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int vocab_size = 0;
  int max_context = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  std::optional<Llama3RopeScaling> llama3_rope_scaling;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // Qwen2/2.5
  // Which head-dimension pairs RoPE rotates in the stored Q/K rows: false = (i, i + d/2) as in HF
  // checkpoints (rotate_half); true = (2i, 2i+1), llama.cpp's "norm" RoPE for GGUF Llama-family
  // rows, which its converter permuted. The loader sets it; the engines read it.
  bool rope_interleaved_pairs = false;
  bool dummy_weights = false;  // random weights: latency/memory work only, labelled in every row

  int group_size() const { return n_query_heads / n_kv_heads; }
  // KV bytes per token across all layers at the given element size (2 for bf16, 4 for f32).
  long long kv_bytes_per_token(int bytes_per_element) const {
    return 2LL * n_layers * n_kv_heads * head_dim * bytes_per_element;
  }
};

const char* architecture_name(Architecture architecture);

}  // namespace kvb
