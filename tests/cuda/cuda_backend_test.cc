// CudaBackend (engine/cuda/cuda_backend.h) against CpuBackend, the f32 reference, through the one
// Engine interface:
// - on a real prompt (SmolLM2-135M, ~1,500 tokens) the kept sets of the prefill policies agree with
//   the CPU's (Jaccard per (layer, KV head)). Against the f32 CPU forward, tokens near a head's
//   cut-off trade places with the bf16 rounding of the GPU's keys, values and queries
//   (results/gpu-sweeps.md has the measured figures; the loose bounds sit under them); against the
//   CPU forward with the GPU's rounding points (ForwardPrecision::kBf16Device) closer, single heads
//   still moved by the two forwards' summation orders, carried from layer to layer; with each CPU
//   layer started from the GPU's input to that layer (layer-aligned), and for the CPU's selection
//   on the GPU's own prefill, issue 17's 0.98 per head. The GPU scores from the statistics its
//   prefill computed (CriticalKV's ‖v W_o‖ too), and none gets a host copy of the prompt's keys and
//   values; where the two forwards part is printed from the same prefills: the prompt's keys per
//   layer;
// - the window queries the GPU prefill hands down are the CPU's (bf16 tolerance);
// - a sample's cells decoded together on the GPU give the ids each gives decoded alone (batch 1),
//   and the GPU's greedy answers are the CPU's for most cells;
// - MagicPIG's sampled decode answers as the CPU's does;
// - plans the device cannot run are refused, naming the method (TOPK per head and MagicPIG run
//   there; so do the decode evictions with a device form, not beside ART).
#include "engine/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/errors.h"
#include "engine/batch_generation.h"
#include "engine/chat_template.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/device_numerics.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/presets.h"
#include "kernels/cpu/dequantize.h"
#include "policies/registry.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/real_prompt.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

using test::compare_kept;
using test::JaccardSummary;
using test::kKeptSetJaccardBound;
using test::real_model;
using test::RealModel;

// The same selection code fed the GPU's own prefill — its keys, values and window queries copied
// to the host — instead of the statistics the device computed beside the prefill. Against the
// device statistics this isolates them and the selection from the forward pass, whose bf16 weights
// and activations the CPU's f32 forward cannot match token for token. One prefill serves every
// plan.
std::vector<KeptIndices> kept_sets_on_host_copy(Engine& engine, const std::vector<TokenId>& ids,
                                                std::vector<CachePlan>& plans) {
  CaptureRequest request;
  for (const CachePlan& plan : plans) request.merge(plan.prefill->capture());
  request.window_attention_sums.clear();
  request.output_perturbations.clear();
  request.key_norms = false;
  request.host_keys_values = true;
  return test::kept_sets_on(engine, ids, plans, {.request = &request});
}

// Why a window-scored head disagrees (issue 17): how many of its L entries the device's window
// attention gives a share above 1e-7 (the query group's mean), against the entries the head keeps.
// When the head keeps more than that, the rest of its kept set is picked among near-zero scores,
// where any rounding decides the order.
void print_window_share(const PrefillCapture& capture, const JaccardSummary& worst,
                        const ModelConfig& config, size_t kept) {
  if (capture.window_attention_sums.empty()) return;
  const std::vector<float>& sums =
      capture.window_attention_sums.front().per_layer.at(worst.worst_layer);
  const int length = capture.length, group = config.n_query_heads / config.n_kv_heads;
  int above = 0;
  for (int j = 0; j < length; ++j) {
    double mean = 0;
    for (int a = 0; a < group; ++a)
      mean += sums[static_cast<size_t>(worst.worst_head * group + a) * length + j];
    if (mean / group > 1e-7) ++above;
  }
  std::printf(
      "[ jaccard  ]   worst head (layer %d, KV head %d): %d of %d entries have a window share "
      "above 1e-7, %zu kept\n",
      worst.worst_layer, worst.worst_head, above, length, kept);
}

// How far one layer's prompt keys lie from the GPU's: the share of entries that differ once both
// are bf16 (the f32 forward's keys rounded to it), and the relative RMS difference.
struct KeyDrift {
  double differing = 0, relative_rms = 0;
};

KeyDrift key_drift(const KvStore& gpu, const KvStore& cpu, int layer) {
  double differing = 0, entries = 0, num = 0, den = 0;
  for (int h = 0; h < gpu.n_kv_heads(); ++h) {
    const size_t n = static_cast<size_t>(gpu.length(layer, h)) * gpu.head_dim();
    const float* a = gpu.keys(layer, h);
    const float* b = cpu.keys(layer, h);
    for (size_t i = 0; i < n; ++i) {
      const float rounded = round_to_bf16(b[i]);
      differing += a[i] != rounded;
      num += double(a[i] - b[i]) * double(a[i] - b[i]);
      den += double(b[i]) * double(b[i]);
    }
    entries += static_cast<double>(n);
  }
  return {differing / entries, std::sqrt(num / den)};
}

// Where the GPU's forward and the CPU's part (what moves the end-to-end kept sets): layer by layer,
// the prompt's keys of the GPU against the CPU forward at the GPU's rounding points and against
// the f32 forward. Where the first layer's keys already differ, the rounding points or a kernel's
// arithmetic differ; where they grow from few differing entries layer by layer, it is the
// summation order, carried. Printed for results/gpu-sweeps.md; held to what the emulation promises:
// in the first layer, before any drift has accumulated, the CPU at the GPU's rounding points is
// closer to the GPU than the f32 forward is.
// The layer-aligned CPU (each layer started from the GPU's input to it) differs by one layer's
// arithmetic: every layer's keys as close as the first layer's, where nothing has drifted yet.
void report_key_drift(const KvStore& on_gpu, const KvStore& as_device, const KvStore& aligned,
                      const KvStore& on_cpu) {
  for (int l = 0; l < on_gpu.n_layers(); ++l) {
    const KeyDrift device = key_drift(on_gpu, as_device, l), f32 = key_drift(on_gpu, on_cpu, l);
    const KeyDrift layer_aligned = key_drift(on_gpu, aligned, l);
    std::printf(
        "[ keys     ] layer %2d: bf16-device CPU %.4f%% of entries differ, relative RMS %.2e; "
        "layer-aligned %.4f%%, %.2e; f32 CPU (rounded) %.4f%%, %.2e\n",
        l, 100 * device.differing, device.relative_rms, 100 * layer_aligned.differing,
        layer_aligned.relative_rms, 100 * f32.differing, f32.relative_rms);
    if (l == 0) {
      EXPECT_LT(device.differing, f32.differing);
    }
    EXPECT_LT(layer_aligned.differing, 0.01) << "layer " << l;
  }
}

TEST(CudaBackend, PrefillPolicyKeptSetsMatchCpuOnARealPrompt) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  const RealModel m = real_model();
  ASSERT_GT(m.prompt.size(), 1000u);
  CpuBackend cpu(*m.model.weights);
  CpuBackend cpu_as_device(*m.model.weights, KvDtype::kBf16, ForwardPrecision::kBf16Device);
  CudaBackend gpu(*m.model.weights);
  // Each engine prefills the prompt once for all eight policies (their capture requests merged);
  // the CPU's f32 forward is the slow part of this test on a larger model.
  const std::vector<std::string>& policies = test::kKeptSetPolicies;
  std::vector<CachePlan> plans = test::kept_set_plans();
  const std::vector<KeptIndices> all_on_cpu = test::kept_sets_on(cpu, m.prompt, plans);
  PrefillCapture as_device_capture;
  const std::vector<KeptIndices> all_on_cpu_as_device = test::kept_sets_on(
      cpu_as_device, m.prompt, plans, {.capture = &as_device_capture, .layer_inputs = true});
  bool copied_keys = true;
  PrefillCapture device_statistics;
  const std::vector<KeptIndices> all_on_gpu = test::kept_sets_on(
      gpu, m.prompt, plans,
      {.copied_keys = &copied_keys, .capture = &device_statistics, .layer_inputs = true});
  // Layer-aligned: the CPU forward at the GPU's rounding points, each layer started from the
  // residual rows the GPU's layer started from (CpuEngine::force_layer_inputs). The free-running
  // forwards above carry every bf16 rounding that their summation orders flip into all later
  // layers; here each layer's keys, values, statistics and kept sets differ from the GPU's by
  // that layer's own arithmetic alone.
  ASSERT_EQ(device_statistics.layer_inputs.size(), static_cast<size_t>(gpu.config().n_layers));
  EXPECT_EQ(device_statistics.layer_inputs[0], as_device_capture.layer_inputs[0])
      << "layer 0's input is the bf16 embedding rows on both";
  CpuBackend cpu_aligned(*m.model.weights, KvDtype::kBf16, ForwardPrecision::kBf16Device);
  cpu_aligned.force_layer_inputs(&device_statistics.layer_inputs);
  const std::vector<KeptIndices> all_on_cpu_aligned =
      test::kept_sets_on(cpu_aligned, m.prompt, plans);
  // The four prefills' stores (kept_sets_on selects without compacting), before the host-copy
  // run prefills the GPU again.
  report_key_drift(gpu.host_store(0), cpu_as_device.host_store(0), cpu_aligned.host_store(0),
                   cpu.host_store(0));
  const std::vector<KeptIndices> all_on_gpu_prefill = kept_sets_on_host_copy(gpu, m.prompt, plans);
  // None of them reads the prompt's keys and values on the host: each scores from statistics the
  // device computed (CriticalKV's ‖v W_o‖ included).
  EXPECT_FALSE(copied_keys);
  for (size_t i = 0; i < policies.size(); ++i) {
    const std::string& policy = policies[i];
    SCOPED_TRACE(policy);
    const KeptIndices& on_cpu = all_on_cpu[i];
    const KeptIndices& on_cpu_as_device = all_on_cpu_as_device[i];
    const KeptIndices& on_gpu = all_on_gpu[i];
    ASSERT_EQ(on_cpu.size(), on_gpu.size());
    // End to end: the f32 CPU forward and its selection against the bf16 GPU forward and the
    // device statistics. Near-ties between tokens flip with the forward's rounding.
    const JaccardSummary end_to_end = compare_kept(on_cpu, on_gpu);
    // End to end at the GPU's precision: the CPU forward rounding where the GPU's does
    // (engine/cpu/device_numerics.h), so that only the order of the f32 sums, the odd bf16
    // rounding it flips (carried through the later layers), and the selection code differ.
    const JaccardSummary as_device = compare_kept(on_cpu_as_device, on_gpu);
    // Layer by layer (issue 17's ≥ 0.98 per (layer, head)): the CPU's forward, statistics and
    // selection from the GPU's input to each layer.
    const JaccardSummary aligned = compare_kept(all_on_cpu_aligned[i], on_gpu);
    // Selection alone: the CPU's selection code on the GPU's own prefill against the kept set the
    // device statistics give.
    const JaccardSummary selection = compare_kept(all_on_gpu_prefill[i], on_gpu);
    std::printf(
        "[ jaccard  ] %-12s CPU f32 forward: mean %.4f, worst (layer, head) %.4f; CPU bf16-device "
        "forward: mean %.4f, worst %.4f (%d heads below %.2f); layer-aligned: mean %.4f, worst "
        "%.4f (layer %d, head %d); same prefill: mean %.4f, worst %.4f; over %d heads\n",
        policy.c_str(), end_to_end.mean, end_to_end.worst, as_device.mean, as_device.worst,
        as_device.below_bound, kKeptSetJaccardBound, aligned.mean, aligned.worst,
        aligned.worst_layer, aligned.worst_head, selection.mean, selection.worst, end_to_end.heads);
    for (const JaccardSummary* summary : {&aligned, &selection})
      if (summary->worst < kKeptSetJaccardBound)
        print_window_share(device_statistics, *summary, gpu.config(),
                           on_gpu[summary->worst_layer][summary->worst_head].size());
    // Bounds from the two models measured (results/gpu-sweeps.md, ninth round). The f32 forward
    // sits furthest from the GPU's bf16 one (Qwen2.5's flat KNorm and H2O heads most), so only its
    // mean is held, loosely: it catches a selection gone wrong, not rounding.
    EXPECT_GE(end_to_end.mean, 0.9);
    // At the GPU's precision single heads still differ by what the forward's f32 summation order
    // flips (a bf16 rounding here and there, carried through the layers): end to end, the mean and
    // a floor under the worst head measured. Layer by layer, issue 17's 0.98 per (layer, head).
    EXPECT_GE(as_device.mean, 0.97);
    EXPECT_GE(as_device.worst, 0.85);
    EXPECT_GE(aligned.worst, kKeptSetJaccardBound);
    // The window-scored policies read window sums the device computed with the casts of the bf16
    // reference (kernels/cuda/window_attention_sums.h), the statistic the CPU recomputes from the
    // keys; before, the device's plain fp32 sums differed by ~1 % per entry, enough to reorder a
    // flat head's kept set (PyramidKV's small layer budgets most).
    EXPECT_GE(selection.worst, kKeptSetJaccardBound);
  }
}

TEST(CudaBackend, WindowQueriesMatchCpu) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  const RealModel m = real_model();
  CpuBackend cpu(*m.model.weights);
  CudaBackend gpu(*m.model.weights);
  CaptureRequest request;
  request.window_queries = 32;
  PrefillCapture on_cpu, on_gpu;
  cpu.reserve(1, static_cast<int>(m.prompt.size()));
  gpu.reserve(1, static_cast<int>(m.prompt.size()));
  cpu.prefill(0, m.prompt, request, on_cpu);
  gpu.prefill(0, m.prompt, request, on_gpu);
  ASSERT_EQ(on_gpu.window, 32);
  ASSERT_EQ(on_gpu.query_window.size(), on_cpu.query_window.size());
  for (size_t l = 0; l < on_cpu.query_window.size(); ++l) {
    const auto& a = on_cpu.query_window[l];
    const auto& b = on_gpu.query_window[l];
    ASSERT_EQ(a.size(), b.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - b[i]) * (a[i] - b[i]);
      den += a[i] * a[i];
    }
    EXPECT_LT(std::sqrt(num / den), 0.05) << "layer " << l;  // bf16 weights and activations
  }
}

TEST(CudaBackend, CellsTogetherEqualCellsAloneAndTrackTheCpu) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  const RealModel m = real_model();
  const std::vector<std::pair<std::string, std::string>> cells = {
      {"full", ""},        {"snapkv", "20%"}, {"snapkv", "50%"}, {"streamingllm", "20%"},
      {"dropkv", "20%"},   {"adakv", "20%"},  {"knorm", "50%"},  {"pyramidkv", "20%"},
      {"binarypc", "20%"}, {"quest", "20%"},  {"topk", "20%"},   {"snapkv+art", "20%"},
      {"full+art", ""}};
  auto run = [&](Engine& engine, bool together) {
    std::vector<CachePlan> plans;
    for (const auto& [policy, budget] : cells)
      plans.push_back(
          make_cache_plan(policy, nlohmann::json::object(),
                          budget.empty() ? std::nullopt : std::optional(Budget::parse(budget))));
    std::vector<CellRequest> requests;
    GenerationOptions options;
    options.max_new_tokens = 12;
    for (auto& plan : plans) requests.push_back({&plan, options});
    return generate_cells(engine, m.model.tokenizer.get(), m.prompt, {}, requests,
                          BatchOptions{together});
  };
  CudaBackend gpu(*m.model.weights);
  CpuBackend cpu(*m.model.weights);
  const auto together = run(gpu, true);
  const auto alone = run(gpu, false);
  const auto reference = run(cpu, true);
  int same_as_cpu = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    SCOPED_TRACE(cells[i].first + " " + cells[i].second);
    EXPECT_EQ(together[i].output_ids, alone[i].output_ids);
    EXPECT_EQ(together[i].kv_bytes, alone[i].kv_bytes);
    EXPECT_EQ(alone[i].decode_batch, 1);
    same_as_cpu += together[i].text == reference[i].text;
    std::printf("[ cell     ] %-12s %-4s gpu '%s' | cpu '%s' (batch %d)\n", cells[i].first.c_str(),
                cells[i].second.c_str(), together[i].text.c_str(), reference[i].text.c_str(),
                together[i].decode_batch);
  }
  EXPECT_GE(same_as_cpu * 10, static_cast<int>(cells.size()) * 8);
  const auto& art = together.back();
  EXPECT_GT(art.kv_blocks_total, 0);  // ART walked on the device
}

TEST(CudaBackend, QuestionAgnosticCellsTogetherEqualCellsAlone) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  const RealModel m = real_model();
  const auto question = m.model.tokenizer->encode(" Which number belongs to Lisbon? Answer:");
  CudaBackend gpu(*m.model.weights);
  auto run = [&](bool together) {
    std::vector<CachePlan> plans;
    for (const char* policy : {"snapkv", "adakv", "streamingllm"})
      plans.push_back(make_cache_plan(policy, nlohmann::json::object(), Budget::parse("30%")));
    plans.push_back(CachePlan{});
    std::vector<CellRequest> requests;
    GenerationOptions options;
    options.max_new_tokens = 8;
    for (auto& plan : plans) requests.push_back({&plan, options});
    return generate_cells(gpu, m.model.tokenizer.get(), m.prompt, question, requests,
                          BatchOptions{together});
  };
  const auto together = run(true);
  const auto alone = run(false);
  for (size_t i = 0; i < together.size(); ++i) {
    EXPECT_EQ(together[i].output_ids, alone[i].output_ids) << "cell " << i;
    EXPECT_EQ(together[i].prompt_tokens, static_cast<int>(m.prompt.size() + question.size()));
  }
}

// MagicPIG samples on the device (LSH sampling, engine/device_selection.h): on the real prompt the
// GPU's greedy answer is the CPU's. The two forwards differ (bf16 against f32), so the hashed
// keys, and with them the sampled sets, are not the same; the answer to a retrieval question
// should be. Cells of one decode-time method decode together as they do alone.
TEST(CudaBackend, MagicPigGeneratesTheCpuAnswer) {
  KVB_REQUIRE_GPU();
  KVB_REQUIRE_FILE(test::default_model_path());
  const RealModel m = real_model();
  // `cells` requests of one plan: one decode group, decoded as one batch.
  auto run = [&](Engine& engine, int cells) {
    CachePlan plan = make_cache_plan("magicpig", nlohmann::json::object(), Budget::parse("20%"));
    GenerationOptions options;
    options.max_new_tokens = 12;
    const std::vector<CellRequest> requests(cells, CellRequest{&plan, options});
    return generate_cells(engine, m.model.tokenizer.get(), m.prompt, {}, requests,
                          BatchOptions{true});
  };
  CudaBackend gpu(*m.model.weights);
  CpuBackend cpu(*m.model.weights);
  const auto on_gpu = run(gpu, 2);
  const auto alone = run(gpu, 1);
  const auto on_cpu = run(cpu, 1);
  std::printf("[ magicpig ] gpu '%s' | cpu '%s'\n", on_gpu[0].text.c_str(), on_cpu[0].text.c_str());
  EXPECT_EQ(on_gpu[0].decode_batch, 2);
  EXPECT_EQ(on_gpu[0].output_ids, on_gpu[1].output_ids) << "two cells of one batch";
  EXPECT_EQ(on_gpu[0].output_ids, alone[0].output_ids) << "batch of two against batch 1";
  if (on_cpu[0].text.find("4817") != std::string::npos) {
    EXPECT_NE(on_gpu[0].text.find("4817"), std::string::npos) << "the CPU retrieves the number";
  }
  size_t common = 0;
  const auto& a = on_gpu[0].output_ids;
  const auto& b = on_cpu[0].output_ids;
  while (common < std::min(a.size(), b.size()) && a[common] == b[common]) ++common;
  EXPECT_GE(common, std::min<size_t>(4, std::min(a.size(), b.size())))
      << "the first tokens of the answer";
}

TEST(CudaBackend, RefusesPlansItCannotRunNamingTheMethod) {
  KVB_REQUIRE_GPU();
  const ModelConfig config = test::small_random_model("refuse", 2, 64, 16, 96, 100);
  const std::shared_ptr<ModelWeights> weights = random_weights(config, 3);
  CudaBackend gpu(*weights);
  const std::vector<std::pair<std::string, nlohmann::json>> refused = {
      {"topk", {{"gqa", "shared"}}}};  // per head it runs on the device; shared over the group not
  for (const auto& [policy, params] : refused) {
    const CachePlan plan = make_cache_plan(policy, params, Budget::parse("50%"));
    try {
      gpu.check_plan(plan);
      ADD_FAILURE() << policy << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(policy), std::string::npos) << e.what();
    }
  }
  // A decode eviction without a device form, and one beside ART.
  class HostOnlyEviction : public DecodeEvictionPolicy {
   public:
    std::string name() const override { return "host_only"; }
    void start(const KvStore&, int, int) override {}
    void after_step(const DecodeStepView&, KvStore&) override {}
  };
  CachePlan host_only;
  host_only.label = "host_only";
  host_only.decode_eviction = std::make_shared<HostOnlyEviction>();
  EXPECT_THROW(gpu.check_plan(host_only), InputError);
  CachePlan with_art = make_cache_plan("h2o_decode", {}, Budget::parse("50%"));
  with_art.early_exit = EarlyExitParams{};
  EXPECT_THROW(gpu.check_plan(with_art), InputError);
  for (const char* policy : {"h2o_decode", "tova", "cake"})  // their device forms
    EXPECT_NO_THROW(gpu.check_plan(make_cache_plan(policy, {}, Budget::parse("50%")))) << policy;
  EXPECT_NO_THROW(gpu.check_plan(make_cache_plan("snapkv+art", {}, Budget::parse("50%"))));
  EXPECT_NO_THROW(gpu.check_plan(make_cache_plan("topk", {}, Budget::parse("50%"))));
  EXPECT_NO_THROW(gpu.check_plan(make_cache_plan("magicpig", {}, Budget::parse("50%"))));
}

}  // namespace
}  // namespace kvb
