// A tiny, complete model as a GGUF image (F32 tensors with recognisable values) for loader and CLI
// tests: 2 layers, d = 8, 2 query heads and 1 KV head of dim 4, ffn 16, vocab 10.
#pragma once

#include <string>
#include <vector>

#include "tests/engine/gguf_builder.h"

namespace kvb::test {

struct TinyGgufOptions {
  std::string architecture = "llama";
  bool tied = true;
  bool qkv_bias = false;
  std::string skip_tensor;       // leave this tensor out
  std::string bad_shape_tensor;  // give this tensor one extra row
};

// Value of element i of the tensor with the given id: distinct per tensor and element.
inline float tiny_value(int tensor_id, size_t i) {
  return static_cast<float>(tensor_id) + 0.001f * static_cast<float>(i);
}

inline GgufBuilder tiny_gguf(const TinyGgufOptions& o = {}) {
  const std::string a = o.architecture;
  GgufBuilder b;
  b.str("general.architecture", a)
      .u32(a + ".block_count", 2)
      .u32(a + ".context_length", 128)
      .u32(a + ".embedding_length", 8)
      .u32(a + ".feed_forward_length", 16)
      .u32(a + ".attention.head_count", 2)
      .u32(a + ".attention.head_count_kv", 1)
      .f32(a + ".rope.freq_base", 5000.0f)
      .f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f)
      .str("tokenizer.ggml.model", "gpt2")
      .str_array("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"});
  int id = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    ++id;
    if (name == o.skip_tensor) return;
    if (name == o.bad_shape_tensor) shape.back() += 1;
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = tiny_value(id, i);
    b.f32_tensor(name, shape, values);
  };
  add("token_embd.weight", {8, 10});
  add("output_norm.weight", {8});
  if (!o.tied) add("output.weight", {8, 10});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {8});
    add(p + "attn_q.weight", {8, 8});
    add(p + "attn_k.weight", {8, 4});
    add(p + "attn_v.weight", {8, 4});
    if (o.qkv_bias) {
      add(p + "attn_q.bias", {8});
      add(p + "attn_k.bias", {4});
      add(p + "attn_v.bias", {4});
    }
    add(p + "attn_output.weight", {8, 8});
    add(p + "ffn_norm.weight", {8});
    add(p + "ffn_gate.weight", {8, 16});
    add(p + "ffn_up.weight", {8, 16});
    add(p + "ffn_down.weight", {16, 8});
  }
  return b;
}

}  // namespace kvb::test
