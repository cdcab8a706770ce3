// Decode-time eviction on the CUDA engine (engine/cuda/cuda_decode_eviction.h) against the CPU
// engine's after_step():
// - on a real prompt (SmolLM2-135M, ~1,500 tokens, 20% budget) h2o_decode, TOVA and CAKE's decode
//   switch keep nearly the positions the CPU keeps per (layer, KV head) after 16 decode steps, hold
//   exactly as many entries, and generate the CPU's tokens. The bounds hold against the CPU forward
//   at the GPU's rounding points (ForwardPrecision::kBf16Device, engine/cpu/device_numerics.h): the
//   f32 reference is printed beside it, but on Qwen2.5-Coder-0.5B its keys drift from the bf16
//   forward's far enough to fail the worst-head bound (results/gpu-sweeps.md, eighth round), a
//   measure of the two forwards, not of the eviction;
// - generate_cells (the sweep's path, kvbench run --device cuda) runs them end to end with the
//   CPU's cache sizes and answers;
// - on random weights the captured decode graph evicts exactly as the eager step does, for the
//   whole batch and for a sub-batch, the host's lengths following the device's rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/batch_generation.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/presets.h"
#include "kernels/cpu/decode_eviction.h"
#include "policies/registry.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/real_prompt.h"

namespace kvb {
namespace {

constexpr int kSteps = 16;

TokenId argmax_of(const std::vector<float>& logits) {
  return static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// One policy's run on an engine: the positions each (layer, KV head) holds after the decode steps
// (empty for layers that do not evict) and the tokens generated.
struct EvictionRun {
  std::vector<std::vector<std::vector<int32_t>>> positions;
  std::vector<TokenId> tokens;
};

// Prefill, selection, compaction, then kSteps greedy steps. On the GPU the eviction restarts with
// record_origins so that the device's entries can be named by position.
EvictionRun run_eviction(Engine& engine, CudaBackend* gpu, const std::vector<TokenId>& prompt,
                         const std::string& policy) {
  CachePlan plan = make_cache_plan(policy, nlohmann::json::object(), Budget::parse("20%"));
  std::vector<float> logits;
  const KeptIndices kept =
      test::kept_on(engine, prompt, plan, {.spare = kSteps + 8, .logits = &logits});
  engine.compact(0, kept, kSteps + 8);
  const int length = static_cast<int>(prompt.size());
  const int budget = budget_tokens_for(plan, length);
  engine.start_decode(0, plan, length, budget);
  engine.prepare_decode();
  const ModelConfig& c = engine.config();
  std::optional<DeviceEvictionSpec> spec =
      plan.decode_eviction->device_eviction(c.n_layers, budget);
  if (gpu) {
    spec->record_origins = true;
    gpu->device().start_decode_eviction(*spec);
  }
  EvictionRun run;
  TokenId token = argmax_of(logits);
  for (int t = 0; t < kSteps; ++t) {
    run.tokens.push_back(token);
    const std::vector<DecodeInput> input = {{0, token, length + t, t}};
    token = engine.decode(input)[0];
  }
  engine.finish_decode(0);
  const KvStore store = gpu ? KvStore() : engine.host_store(0);
  run.positions.resize(c.n_layers, std::vector<std::vector<int32_t>>(c.n_kv_heads));
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads && spec->evicts(l); ++h) {
      std::vector<int32_t>& held = run.positions[l][h];
      if (!gpu) {
        held.assign(store.positions(l, h), store.positions(l, h) + store.length(l, h));
        continue;
      }
      // Origins: -(1 + i) for the i-th entry held at the start (kept[l][h][i] of the prompt).
      for (int32_t origin : gpu->device().eviction_origins(l, 0, h))
        held.push_back(origin < 0 ? kept[l][h][-1 - origin] : origin);
      std::sort(held.begin(), held.end());
    }
  return run;
}

// How closely the GPU's run tracks one CPU run.
struct EvictionAgreement {
  double mean = 0, worst = 1;
  int heads = 0, same_tokens = 0;
  size_t held_on_cpu = 0, held_on_gpu = 0;
};

EvictionAgreement agreement(const EvictionRun& on_cpu, const EvictionRun& on_gpu) {
  EvictionAgreement a;
  for (size_t l = 0; l < on_cpu.positions.size(); ++l)
    for (size_t h = 0; h < on_cpu.positions[l].size(); ++h) {
      if (on_cpu.positions[l][h].empty()) continue;
      a.held_on_cpu += on_cpu.positions[l][h].size();
      a.held_on_gpu += on_gpu.positions[l][h].size();
      const double j = test::jaccard(on_cpu.positions[l][h], on_gpu.positions[l][h]);
      a.mean += j;
      a.worst = std::min(a.worst, j);
      ++a.heads;
    }
  if (a.heads > 0) a.mean /= a.heads;
  while (a.same_tokens < kSteps && on_cpu.tokens[a.same_tokens] == on_gpu.tokens[a.same_tokens])
    ++a.same_tokens;
  return a;
}

TEST(CudaEviction, KeptPositionsAndTokensTrackTheCpuOnARealPrompt) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  const test::RealModel m = test::real_model();
  CpuBackend cpu(*m.model.weights);
  CpuBackend cpu_as_device(*m.model.weights, KvDtype::kBf16, ForwardPrecision::kBf16Device);
  CudaBackend gpu(*m.model.weights);
  for (const std::string policy : {"h2o_decode", "tova", "cake"}) {
    SCOPED_TRACE(policy);
    const EvictionRun on_gpu = run_eviction(gpu, &gpu, m.prompt, policy);
    const EvictionAgreement f32 = agreement(run_eviction(cpu, nullptr, m.prompt, policy), on_gpu);
    const EvictionRun on_cpu = run_eviction(cpu_as_device, nullptr, m.prompt, policy);
    const EvictionAgreement a = agreement(on_cpu, on_gpu);
    for (size_t l = 0; l < on_cpu.positions.size(); ++l)
      for (size_t h = 0; h < on_cpu.positions[l].size(); ++h) {
        if (on_cpu.positions[l][h].empty()) continue;
        const double cpu_size = double(on_cpu.positions[l][h].size());
        // CAKE shares its budget among layers by the prefill's attention statistics, which the
        // two forwards' summation orders still move slightly, the total not at all
        // (results/gpu-sweeps.md, sixth and ninth rounds: up to 1.4 % of a layer's entries). The
        // others keep a fixed budget per layer.
        const double slack = policy == "cake" ? std::max(2.0, 0.02 * cpu_size) : 0.0;
        EXPECT_NEAR(double(on_gpu.positions[l][h].size()), cpu_size, slack)
            << "layer " << l << " head " << h;
      }
    ASSERT_GT(a.heads, 0);
    EXPECT_EQ(a.held_on_gpu, a.held_on_cpu);
    std::printf(
        "[ eviction ] %-10s after %d steps, Jaccard mean / worst (layer, head) over %d heads: "
        "bf16-device CPU %.4f / %.4f, first %d tokens equal; f32 CPU %.4f / %.4f, first %d\n",
        policy.c_str(), kSteps, a.heads, a.mean, a.worst, a.same_tokens, f32.mean, f32.worst,
        f32.same_tokens);
    // The prefill's kept sets already differ by near-ties (cuda_backend_test.cc); the decode
    // steps add one choice per step on top.
    EXPECT_GE(a.mean, 0.9);
    EXPECT_GE(a.worst, 0.6);
    EXPECT_GE(a.same_tokens, kSteps / 2);
  }
}

TEST(CudaEviction, CellsRunEndToEndWithTheCpusCacheSizes) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  const test::RealModel m = test::real_model();
  auto run = [&](Engine& engine) {
    std::vector<CachePlan> plans;
    for (const char* policy : {"h2o_decode", "tova", "cake"})
      plans.push_back(make_cache_plan(policy, nlohmann::json::object(), Budget::parse("20%")));
    std::vector<CellRequest> requests;
    GenerationOptions options;
    options.max_new_tokens = 12;
    for (auto& plan : plans) requests.push_back({&plan, options});
    return generate_cells(engine, m.model.tokenizer.get(), m.prompt, {}, requests, BatchOptions{});
  };
  CudaBackend gpu(*m.model.weights);
  CpuBackend cpu(*m.model.weights);
  const auto on_gpu = run(gpu);
  const auto on_cpu = run(cpu);
  int same = 0;
  for (size_t i = 0; i < on_gpu.size(); ++i) {
    SCOPED_TRACE(i);
    // The same number of entries at the end, as a share of the full prompt's cache (the backends
    // count bytes per entry differently).
    EXPECT_EQ(on_gpu[i].kv_bytes_end * on_cpu[i].kv_bytes_full,
              on_cpu[i].kv_bytes_end * on_gpu[i].kv_bytes_full);
    EXPECT_LT(on_gpu[i].kv_bytes_end, on_gpu[i].kv_bytes_full / 4);
    same += on_gpu[i].text == on_cpu[i].text;
    std::printf("[ cell     ] %zu gpu '%s' | cpu '%s'\n", i, on_gpu[i].text.c_str(),
                on_cpu[i].text.c_str());
  }
  EXPECT_GE(same, 2);
}

// Two prompts of different lengths, layer 1 dense: the graph's steps against eager ones.
TEST(CudaEviction, GraphStepsEvictAsEagerStepsForTheBatchAndASubBatch) {
  KVB_REQUIRE_GPU();
  ModelConfig config = test::small_random_model("random-eviction", 3, 256, 64, 512, 1000);
  config.n_query_heads = 8;
  const std::shared_ptr<ModelWeights> weights = random_weights(config, 5);
  DeviceEvictionSpec spec;
  spec.statistic = DeviceEvictionSpec::Statistic::kAccumulatedGroupSum;
  spec.keep = {120, -1, 100};
  spec.recent = 30;
  spec.record_origins = true;
  const int lengths[] = {200, 150};
  auto make = [&] {
    auto engine = CudaEngine::from_weights(*weights);
    engine->allocate_cache(2, 240);
    for (int b = 0; b < 2; ++b)
      engine->prefill(b, test::strided_token_ids(lengths[b], 37 + 6 * b, 11 + b, 1000));
    engine->start_decode_eviction(spec);
    return engine;
  };
  auto graph = make(), eager = make();
  for (int t = 0; t < 10; ++t) {
    const int first = t < 6 ? 0 : 1, count = t < 6 ? 2 : 1;  // then sequence 1 alone
    for (CudaEngine* engine : {graph.get(), eager.get()}) {
      std::vector<int32_t> tokens, positions;
      for (int b = first; b < first + count; ++b) {
        tokens.push_back((t * 31 + b * 7) % 1000);
        positions.push_back(engine->next_position(b));
      }
      engine->set_next_tokens(first, tokens, positions);
    }
    graph->decode_step(first, count, true);
    eager->decode_step(first, count, false);
    ASSERT_EQ(graph->next_tokens(first, count), eager->next_tokens(first, count)) << "step " << t;
  }
  for (int b = 0; b < 2; ++b) {
    const int steps = b == 0 ? 6 : 10;
    for (int l = 0; l < config.n_layers; ++l)
      for (int h = 0; h < config.n_kv_heads; ++h) {
        SCOPED_TRACE(testing::Message() << "sequence " << b << " layer " << l << " head " << h);
        int expected = lengths[b];
        for (int t = 0; t < steps; ++t)
          expected = kernels::evicted_length(expected + 1, spec.keep[l], 0, spec.recent);
        EXPECT_EQ(graph->length(l, b, h), expected);
        EXPECT_EQ(eager->length(l, b, h), expected);
        EXPECT_EQ(graph->cached_keys(l, b, h), eager->cached_keys(l, b, h));
        const std::vector<int32_t> origins = graph->eviction_origins(l, b, h);
        EXPECT_EQ(origins, eager->eviction_origins(l, b, h));
        if (l == 1) continue;  // dense: no origins kept
        ASSERT_EQ(static_cast<int>(origins.size()), expected);
        // The last `recent` entries are the latest positions, in order (a prompt entry's origin
        // names its index at the start, here its position).
        for (int i = 0; i < spec.recent; ++i) {
          const int32_t origin = origins[expected - 1 - i];
          EXPECT_EQ(origin < 0 ? -1 - origin : origin, lengths[b] + steps - 1 - i);
        }
      }
  }
}

}  // namespace
}  // namespace kvb
