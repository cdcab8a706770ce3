// Whole-model logits on the GPU (bf16) against the CPU engine (f32): a small random model with the
// kernels' head dims and QKV bias, one with Qwen2.5-Coder-0.5B's shapes, and SmolLM2 itself;
// prefill, chunked prefill and decode steps.
#include "engine/cuda/cuda_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "engine/cpu/forward.h"
#include "engine/model.h"
#include "engine/presets.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

int argmax(const std::vector<float>& x) {
  return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
}

// bf16 weights and activations against f32: differences of a few percent of the logit scale.
void expect_close_logits(const std::vector<float>& gpu, const std::vector<float>& cpu,
                         double tolerance, const std::string& where) {
  ASSERT_EQ(gpu.size(), cpu.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    scale = std::max(scale, double(std::abs(cpu[i])));
    worst = std::max(worst, double(std::abs(gpu[i] - cpu[i])));
  }
  EXPECT_LT(worst, tolerance * scale) << where << ": max |diff| " << worst << " vs scale " << scale;
  // Top-1 agrees unless the CPU's top two are within the tolerance of each other.
  std::vector<float> sorted = cpu;
  std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
  if (sorted[0] - sorted[1] > 2 * worst) EXPECT_EQ(argmax(gpu), argmax(cpu)) << where;
}

void compare_engines(const ModelWeights& weights, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& continuation, int chunk, double tolerance) {
  CpuEngine cpu(weights);
  KvStore store(weights.config.n_layers, weights.config.n_kv_heads, weights.config.head_dim);
  auto expected = cpu.forward_chunk(prompt, store, CaptureRequest{}, nullptr);

  auto gpu = CudaEngine::from_weights(weights);
  gpu->allocate_cache(1, static_cast<int>(prompt.size() + continuation.size()) + 4);
  auto got = gpu->prefill(0, prompt, chunk);
  expect_close_logits(got, expected, tolerance, "prefill");

  CachePlan plan;
  int position = static_cast<int>(prompt.size());
  for (size_t step = 0; step < continuation.size(); ++step, ++position) {
    expected = cpu.decode_step(continuation[step], position, static_cast<int>(step), store, plan);
    gpu->set_next_tokens({continuation[step]}, {position});
    gpu->decode_step(/*use_graph=*/step > 0);
    got = gpu->last_logits(0);
    expect_close_logits(got, expected, tolerance, "decode step " + std::to_string(step));
  }
  EXPECT_EQ(gpu->length(0, 0, 0), position);
  EXPECT_EQ(gpu->kv_bytes(), int64_t(position) * weights.config.n_layers *
                                 weights.config.n_kv_heads * 2 * weights.config.head_dim * 2);
}

TEST(CudaEngine, RandomModelMatchesCpu) {
  KVB_REQUIRE_GPU();
  ModelConfig config = test::small_random_model("random-test", 3, 256, 64, 512, 1000);
  config.qkv_bias = true;
  auto weights = random_weights(config, 42);
  compare_engines(*weights, test::strided_token_ids(150, 37, 11, 1000), {5, 17, 999, 0},
                  /*chunk=*/64, 0.05);
}

// Qwen2.5-Coder-0.5B's geometry (the 32K model of harness/scripts/get-model.sh): 14 query heads on
// 2 KV heads (group 7), d_model 896, head_dim 64, ffn 4864, RoPE theta 1e6, an untied output, and
// Q/K/V biases of the real model's order of magnitude (random_weights' are tiny).
TEST(CudaEngine, RandomModelWithQwen2CoderShapesMatchesCpu) {
  KVB_REQUIRE_GPU();
  ModelConfig config = test::small_random_model("random-qwen2-coder", 2, 896, 64, 4864, 1000);
  config.architecture = Architecture::kQwen2;
  config.n_query_heads = 14;
  config.rope_theta = 1e6f;
  config.qkv_bias = true;
  auto weights = random_weights(config, 20);
  uint32_t seed = 100;
  for (LayerWeights& layer : weights->layers)
    for (std::vector<float>* bias : {&layer.bq, &layer.bk, &layer.bv})
      *bias = test::random_bf16_values(bias->size(), seed++, 2.0f);
  compare_engines(*weights, test::strided_token_ids(200, 41, 3, 1000), {7, 123, 999},
                  /*chunk=*/64, 0.05);
}

// The decode step's split layout is sized by a bound on the lengths, not the capacity; the graph
// captured with a bound (20-token prompt: 320) must be re-captured when the cache outgrows it
// (step 300 of 320) and the logits stay the CPU engine's throughout.
TEST(CudaEngine, DecodeGraphIsRecapturedWhenTheLengthsOutgrowItsBound) {
  KVB_REQUIRE_GPU();
  auto weights =
      random_weights(test::small_random_model("random-test-long-decode", 2, 128, 64, 256, 500), 11);
  compare_engines(*weights, test::strided_token_ids(20, 31, 7, 500),
                  test::strided_token_ids(320, 17, 3, 500),
                  /*chunk=*/64, 0.05);
}

// head_dim 128: on an H200 the prefill runs the wgmma kernel (TMA reads from the engine's qkv rows
// and KV cache), over three chunks so that two of them attend after a prefix.
TEST(CudaEngine, RandomModelWithWgmmaPrefillMatchesCpu) {
  KVB_REQUIRE_GPU();
  auto weights =
      random_weights(test::small_random_model("random-test-d128", 2, 512, 128, 1024, 1000), 7);
  compare_engines(*weights, test::strided_token_ids(333, 53, 5, 1000), {3, 501}, /*chunk=*/128,
                  0.05);
}

TEST(CudaEngine, SmolLm2MatchesCpu) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  // The CPU side is the f32 reference (the GPU computes on the same values in bf16).
  LoadedModel model =
      load_model(test::default_model_path().string(), {.weight_format = WeightFormat::kF32});
  auto prompt =
      model.tokenizer->encode("The capital of France is Paris. The capital of Italy is", true);
  compare_engines(*model.weights, prompt, {model.tokenizer->encode(" Rome")[0], 13}, 4096, 0.05);
}

TEST(CudaEngine, OutOfMemoryNamesBatchAndContext) {
  KVB_REQUIRE_GPU();
  ModelConfig config = preset_config("llama-3.1-8b");
  config.n_layers = 1;  // weights small; the cache is what must not fit
  auto engine = CudaEngine::from_preset(config, 1);
  try {
    engine->allocate_cache(100000, 131072);
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("batch 100000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("context 131072"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvb
