// Writes small valid GGUF images (tests/engine/tiny_gguf.h, plus quantised tensors) into a folder,
// as the fuzzer's seed corpus. Usage: make_gguf_seeds DIR
#include <cstdio>
#include <string>

#include "tests/engine/tiny_gguf.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  kvb::test::tiny_gguf().write(dir / "llama.gguf");
  kvb::test::TinyGgufOptions qwen;
  qwen.architecture = "qwen2";
  qwen.tied = false;
  qwen.qkv_bias = true;
  kvb::test::tiny_gguf(qwen).write(dir / "qwen2.gguf");
  kvb::test::GgufBuilder quant;
  quant.str("general.architecture", "llama")
      .u32("general.alignment", 64)
      .str_array("tokenizer.ggml.tokens", {"a", "b"})
      .f32_array("tokenizer.ggml.scores", {0.5f, -1.0f})
      .i32_array("tokenizer.ggml.token_type", {1, 3})
      .boolean("tokenizer.ggml.add_bos_token", true)
      .u64("big", 1ull << 40)
      .tensor("q4_0", {32}, 2, std::vector<uint8_t>(18, 0x11))
      .tensor("q4_1", {32}, 3, std::vector<uint8_t>(20, 0x22))
      .tensor("q8_0", {32}, 8, std::vector<uint8_t>(34, 0x33))
      .tensor("q4_k", {256}, 12, std::vector<uint8_t>(144, 0x44))
      .tensor("q6_k", {256}, 14, std::vector<uint8_t>(210, 0x55))
      .tensor("f16", {4}, 1, std::vector<uint8_t>(8, 0x3C))
      .tensor("bf16", {4}, 30, std::vector<uint8_t>(8, 0x3F));
  quant.write(dir / "quantised.gguf");
  return 0;
}
