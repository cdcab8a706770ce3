// Loading a model file straight to the GPU (CudaEngine::from_source, engine/cuda/device_weights.h)
// against the host path: a tiny synthetic bf16 HF checkpoint (Llama with Llama-3 RoPE scaling;
// Qwen2 with QKV biases and tied embeddings) uploaded tensor by tensor gives the device tensors
// and logits of the host f32 weights converted at upload (CudaEngine::from_weights), and logits
// close to the CPU engine's; a staging buffer smaller than a tensor changes nothing; CriticalKV
// runs on weights that live on the device only (its ‖v W_o‖ is a device statistic), and a view that
// asks for W_o itself gets the device's, downloaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/batch_generation.h"
#include "engine/cpu/forward.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/device_weights.h"
#include "engine/model.h"
#include "engine/synthetic_checkpoint.h"
#include "engine/weight_source.h"
#include "kernels/cpu/dequantize.h"
#include "policies/registry.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

ModelConfig synthetic_config(Architecture arch) {
  ModelConfig c = test::small_random_model("synthetic", 2, 256, 64, 512, 1000);
  c.architecture = arch;
  if (arch == Architecture::kQwen2) {
    c.qkv_bias = true;
    c.tied_embeddings = true;
  } else {
    c.llama3_rope_scaling = Llama3RopeScaling{8.0f, 1.0f, 4.0f, 256};
  }
  return c;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, double* scale) {
  *scale = 0;
  for (float x : b) *scale = std::max(*scale, double(std::abs(x)));
  return test::max_abs_diff(a, b);
}

std::vector<uint16_t> download_bits(const cuda::DeviceBuffer& buffer) {
  std::vector<uint16_t> bits(buffer.bytes() / 2);
  cuda::check(cudaMemcpy(bits.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost),
              "download");
  return bits;
}

std::vector<uint16_t> bf16_bits(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<uint16_t> bits;
  for (const auto* part : parts)
    for (float x : *part) bits.push_back(f32_to_bf16(x));
  return bits;
}

std::vector<uint16_t> bf16_bits(std::initializer_list<const WeightMatrix*> parts) {
  std::vector<uint16_t> bits;
  for (const auto* part : parts)
    for (float x : part->to_f32()) bits.push_back(f32_to_bf16(x));
  return bits;
}

TEST(DeviceLoad, SyntheticCheckpointUploadsLikeTheHostWeights) {
  KVB_REQUIRE_GPU();
  for (Architecture arch : {Architecture::kLlama, Architecture::kQwen2}) {
    SCOPED_TRACE(architecture_name(arch));
    const fs::path dir = test::fresh_temp_dir("kvb_device_load");
    write_synthetic_checkpoint(synthetic_config(arch), dir, {.seed = 11});
    const LoadedModel host = load_model(dir.string(), {.weight_format = WeightFormat::kF32});
    const auto from_file = CudaEngine::from_source(*open_weight_source(dir));
    const auto from_host = CudaEngine::from_weights(*host.weights);
    for (int l = 0; l < host.weights->config.n_layers; ++l)
      EXPECT_EQ(from_file->output_projection(l), host.weights->layers[l].wo.f32());

    const std::vector<int32_t> prompt = test::strided_token_ids(150, 37, 11, 1000);
    for (CudaEngine* gpu : {from_file.get(), from_host.get()}) gpu->allocate_cache(1, 160);
    const std::vector<float> file_logits = from_file->prefill(0, prompt);
    const std::vector<float> host_logits = from_host->prefill(0, prompt);
    double scale = 0;
    EXPECT_LE(max_abs_diff(file_logits, host_logits, &scale), 1e-3 * scale);

    CpuEngine cpu(*host.weights);
    const ModelConfig& c = host.weights->config;
    KvStore store(c.n_layers, c.n_kv_heads, c.head_dim);
    const std::vector<TokenId> ids(prompt.begin(), prompt.end());
    const std::vector<float> cpu_logits = cpu.forward_chunk(ids, store, CaptureRequest{}, nullptr);
    EXPECT_LT(max_abs_diff(file_logits, cpu_logits, &scale), 0.05 * scale);
  }
}

TEST(DeviceLoad, AStagingBufferSmallerThanATensorUploadsTheSameBits) {
  KVB_REQUIRE_GPU();
  const fs::path dir = test::fresh_temp_dir("kvb_device_staging");
  write_synthetic_checkpoint(synthetic_config(Architecture::kQwen2), dir, {.seed = 5});
  const LoadedModel host = load_model(dir.string(), {.weight_format = WeightFormat::kF32});
  const ModelWeights& w = *host.weights;
  cudaStream_t stream = nullptr;
  cuda::check(cudaStreamCreate(&stream), "cudaStreamCreate");
  UploadReport report;
  const DeviceWeights device = upload_weights(*open_weight_source(dir), stream, &report, 8 << 10);
  cudaStreamDestroy(stream);
  EXPECT_EQ(report.tensors, 26);
  EXPECT_GT(report.peak_host_rss_bytes, 0);
  EXPECT_EQ(download_bits(device.embedding), bf16_bits({&w.token_embedding}));
  EXPECT_EQ(device.output.data(), nullptr);  // tied
  for (int l = 0; l < w.config.n_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    const CudaLayer& dl = device.layers[l];
    EXPECT_EQ(download_bits(dl.wqkv), bf16_bits({&lw.wq, &lw.wk, &lw.wv}));
    EXPECT_EQ(download_bits(dl.bqkv), bf16_bits({&lw.bq, &lw.bk, &lw.bv}));
    EXPECT_EQ(download_bits(dl.w_gate_up), bf16_bits({&lw.w_gate, &lw.w_up}));
    EXPECT_EQ(download_bits(dl.w_down), bf16_bits({&lw.w_down}));
    EXPECT_EQ(download_bits(dl.ffn_norm), bf16_bits({&lw.ffn_norm}));
  }
}

KeptIndices criticalkv_kept(Engine& engine, const std::vector<TokenId>& ids) {
  CachePlan plan = make_cache_plan("criticalkv", nlohmann::json::object(), Budget::parse("25%"));
  engine.check_plan(plan);
  engine.reserve(1, static_cast<int>(ids.size()) + 8);
  PrefillCapture captured;
  engine.prefill(0, ids, plan.prefill->capture(), captured);
  KvStore host_copy;
  return select_kept(
      plan, captured,
      [&](const PrefillCapture& captures, const CaptureRequest& wanted) {
        return engine.prefill_view(0, captures, wanted, host_copy);
      },
      engine.config(), budget_tokens_for(plan, static_cast<int>(ids.size())));
}

TEST(DeviceLoad, CriticalKvRunsOnWeightsThatLiveOnTheDeviceOnly) {
  KVB_REQUIRE_GPU();
  const fs::path dir = test::fresh_temp_dir("kvb_device_criticalkv");
  write_synthetic_checkpoint(synthetic_config(Architecture::kLlama), dir, {.seed = 2});
  const LoadedModel host = load_model(dir.string(), {.weight_format = WeightFormat::kF32});
  const LoadedModel device_only = load_model(dir.string(), {.weights_on_host = false});
  ASSERT_TRUE(weights_live_on_device_only(*device_only.weights));
  CudaBackend with_host_weights(*host.weights), with_device_weights(*device_only.weights);
  const std::vector<int32_t> prompt = test::strided_token_ids(300, 37, 11, 1000);
  const std::vector<TokenId> ids(prompt.begin(), prompt.end());
  const KeptIndices expected = criticalkv_kept(with_host_weights, ids);
  const KeptIndices got = criticalkv_kept(with_device_weights, ids);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t l = 0; l < got.size(); ++l) EXPECT_EQ(got[l], expected[l]) << "layer " << l;

  // A request for W_o itself: each layer's, downloaded once from the device.
  CaptureRequest wants_wo;
  wants_wo.output_projection = true;
  PrefillCapture captured;
  with_device_weights.reserve(1, static_cast<int>(ids.size()) + 8);
  with_device_weights.prefill(0, ids, wants_wo, captured);
  KvStore unused;
  const PrefillView view = with_device_weights.prefill_view(0, captured, wants_wo, unused);
  for (int l = 0; l < host.weights->config.n_layers; ++l) {
    const std::vector<float>& wo = host.weights->layers[l].wo.f32();
    ASSERT_NE(view.layers[l].output_projection, nullptr);
    EXPECT_TRUE(std::equal(wo.begin(), wo.end(), view.layers[l].output_projection)) << l;
  }
}

}  // namespace
}  // namespace kvb
