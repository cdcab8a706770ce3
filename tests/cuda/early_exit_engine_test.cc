// The CUDA engine's decode step with the ART walk (kernels/cuda/early_exit_decode.h),
// graph-captured, against the plain decode kernel and the CPU engine running the same plan. The
// kernel against its CPU twin: early_exit_decode_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "common/errors.h"
#include "engine/cpu/forward.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/presets.h"
#include "kernels/cpu/early_exit_decode.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

// The engine's decode step with ART (graph-captured): with zero thresholds the logits equal the
// plain kernel's and every block is walked; with the defaults they stay close to the CPU engine
// running the same "full+art" plan (a random model's attention is diffuse, so neither stops).
TEST(EarlyExitEngineTest, CudaEngineDecodeStepUsesTheWalk) {
  KVB_REQUIRE_GPU();
  const ModelConfig config = test::small_random_model("random-art", 2, 256, 64, 512, 1000);
  auto weights = random_weights(config, 7);
  const std::vector<int32_t> prompt = test::strided_token_ids(700, 53, 5, 1000);
  const std::vector<int32_t> continuation = {3, 500, 77};

  auto run = [&](const std::optional<EarlyExitParams>& art) {
    auto gpu = CudaEngine::from_weights(*weights);
    gpu->allocate_cache(1, static_cast<int>(prompt.size() + continuation.size()) + 4);
    gpu->prefill(0, prompt);
    gpu->set_early_exit(art);
    std::vector<std::vector<float>> logits;
    for (size_t step = 0; step < continuation.size(); ++step) {
      gpu->set_next_tokens({continuation[step]}, {static_cast<int>(prompt.size() + step)});
      gpu->decode_step(/*use_graph=*/true);
      logits.push_back(gpu->last_logits(0));
    }
    return std::make_pair(logits, gpu->early_exit_counts());
  };
  const auto [plain, no_counts] = run(std::nullopt);
  EXPECT_EQ(no_counts.total, 0);
  EarlyExitParams zero;
  zero.tau = zero.phi = 0.f;
  const auto [walked, counts] = run(zero);
  int64_t blocks = 0;
  for (size_t step = 0; step < continuation.size(); ++step)
    blocks += kernels::early_exit_block_count(static_cast<int>(prompt.size() + step + 1), {});
  blocks *= config.n_layers * config.n_kv_heads;
  EXPECT_EQ(counts.total, blocks);
  EXPECT_EQ(counts.visited, blocks);
  EXPECT_EQ(counts.loaded, blocks);
  for (size_t step = 0; step < plain.size(); ++step)
    EXPECT_LT(test::max_abs_diff(walked[step], plain[step]), 2e-2) << "step " << step;

  const auto [defaults, default_counts] = run(EarlyExitParams{});
  EXPECT_EQ(default_counts.total, blocks);
  CpuEngine cpu(*weights);
  KvStore store(config.n_layers, config.n_kv_heads, config.head_dim);
  cpu.forward_chunk(prompt, store, CaptureRequest{}, nullptr);
  CachePlan plan;
  plan.early_exit = EarlyExitParams{};
  for (size_t step = 0; step < continuation.size(); ++step) {
    const auto expected =
        cpu.decode_step(continuation[step], static_cast<int>(prompt.size() + step),
                        static_cast<int>(step), store, plan);
    double scale = 0;
    for (float x : expected) scale = std::max(scale, double(std::abs(x)));
    EXPECT_LT(test::max_abs_diff(defaults[step], expected), 0.05 * scale) << "step " << step;
  }
  EXPECT_EQ(plan.early_exit_stats.blocks_total, blocks);

  EarlyExitParams wide_blocks;
  wide_blocks.block_size = 128;
  auto gpu = CudaEngine::from_weights(*weights);
  EXPECT_THROW(gpu->set_early_exit(wide_blocks), InputError);
}

}  // namespace
}  // namespace kvb
