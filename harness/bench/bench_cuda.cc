// Everything here needs the CUDA engine; a CPU-only build compiles this file empty.
#ifdef KVB_HAVE_CUDA
#include "harness/bench/bench_cuda.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "common/errors.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/cuda/device_info.h"
#include "engine/model.h"
#include "engine/presets.h"
#include "engine/weight_source.h"

namespace kvb {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

// `tokens` repeated (and cut) to exactly n ids.
std::vector<int32_t> tiled_ids(const std::vector<int32_t>& tokens, int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = tokens[i % tokens.size()];
  return ids;
}

int32_t argmax_token(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Tokens kept per head after prefill compression (the window counts inside the budget).
int kept_tokens(const CudaBenchOptions& options, int context) {
  if (!options.budget || !options.compress_prefill) return context;
  return std::max(1, std::min(context, options.budget->tokens_for(context)));
}

// Uniform kept set for latency work: the most recent `keep` entries of every head. Which entries a
// policy keeps does not change the decode cost, only how many.
KeptIndices recent_kept(const ModelConfig& config, int length, int keep) {
  std::vector<int32_t> head(keep);
  for (int i = 0; i < keep; ++i) head[i] = length - keep + i;
  return KeptIndices(config.n_layers, std::vector<std::vector<int32_t>>(config.n_kv_heads, head));
}

// A plan's decode eviction from the next step on, at the kept budget (every timed step then
// evicts one entry per head); after the cache is filled, which ends any earlier one.
void start_eviction(CudaEngine& engine, const CudaBenchOptions& options, int keep) {
  if (options.decode_eviction)
    engine.start_decode_eviction(
        *options.decode_eviction->device_eviction(engine.config().n_layers, keep));
}

double time_decode(CudaEngine& engine, int steps, bool graphs) {
  engine.decode_step(graphs);  // warm-up (captures the graph)
  engine.synchronize();
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) engine.decode_step(graphs);
  engine.synchronize();
  return ms_since(start) / steps;
}

// Largest batch whose cache (capacity per head) fits, by doubling then bisection.
int largest_batch(CudaEngine& engine, int capacity) {
  auto fits = [&](int batch) {
    try {
      engine.allocate_cache(batch, capacity);
      return true;
    } catch (const CapacityError&) {
      return false;
    }
  };
  int low = 0, high = 1;
  while (fits(high)) {
    low = high;
    high *= 2;
  }
  while (high - low > 1) {
    const int mid = (low + high) / 2;
    (fits(mid) ? low : high) = mid;
  }
  return low;
}

// TPOT with the ART walk on the same cache (reset to the same state) as the plain measurement in
// `tpot_ms`, which becomes the ART figure; the plain one is kept as tpot_without_art_ms.
void measure_early_exit(CudaEngine& engine, const CudaBenchOptions& options,
                        const std::function<void()>& reset_cache, nlohmann::json& row,
                        double& tpot_ms) {
  reset_cache();
  engine.set_early_exit(options.early_exit);
  engine.reset_early_exit_counts();
  const double art_ms = time_decode(engine, options.decode_steps, options.use_graphs);
  const CudaEngine::EarlyExitCounts counts = engine.early_exit_counts();
  engine.set_early_exit(std::nullopt);
  const double total = std::max<int64_t>(counts.total, 1);
  row["tpot_without_art_ms"] = tpot_ms;
  row["art_speedup"] = tpot_ms / art_ms;
  row["art_blocks_skipped"] = 1.0 - counts.visited / total;
  row["art_work_skipped"] = 1.0 - counts.loaded / total;
  row["art_blocks_total"] = counts.total;
  std::fprintf(
      stderr,
      "[bench] ART: TPOT %.3f ms vs %.3f ms without (speed-up %.3fx), blocks skipped %.4f, "
      "tiles never fetched %.4f\n",
      art_ms, tpot_ms, tpot_ms / art_ms, 1.0 - counts.visited / total, 1.0 - counts.loaded / total);
  tpot_ms = art_ms;
}

// P rows ~ N(0, 1/d) for every (layer, KV head): what a fit costs is not part of the decode step.
std::vector<float> random_projection(const ModelConfig& config) {
  std::mt19937 rng(97);
  std::normal_distribution<float> gaussian(0.f, 1.f / std::sqrt(float(config.head_dim)));
  std::vector<float> rows(size_t(config.n_layers) * config.n_kv_heads * 64 * config.head_dim);
  for (float& x : rows) x = gaussian(rng);
  return rows;
}

// TPOT of one decode selector on a cache of `keep` entries per head (the Full figure's cache,
// refilled), with its start (hashing / page bounds of every layer) timed apart. Rows fitted to the
// prompt (online BinaryPC) are random rows here: the bench's keys are random too.
nlohmann::json measure_selector(CudaEngine& engine, const CudaBenchOptions& options,
                                const SparseDecodeBench& selector,
                                const std::function<void()>& reset_cache, int context, int keep,
                                double full_tpot_ms) {
  const int batch = engine.batch();
  reset_cache();
  const int budget_tokens = std::max(1, std::min(keep, selector.budget.tokens_for(keep)));
  DeviceSelectionSpec spec = *selector.selector->device_selection(engine.config(), budget_tokens);
  if (spec.budget_fraction == 0) spec.budget_tokens = budget_tokens;
  const bool random_rows =
      spec.scores == DeviceSelectionSpec::Scores::kSignCodes && spec.sign_codes.projection.empty();
  if (random_rows) spec.sign_codes.projection = random_projection(engine.config());
  const auto start = Clock::now();
  engine.start_sparse_decode(spec);
  const double start_ms = ms_since(start);
  const double tpot_ms = time_decode(engine, options.decode_steps, options.use_graphs);
  engine.stop_sparse_decode();
  nlohmann::json row{{"policy", selector.policy},    {"budget_tokens", budget_tokens},
                     {"start_ms", start_ms},         {"tpot_ms", tpot_ms},
                     {"tpot_full_ms", full_tpot_ms}, {"speedup_vs_full", full_tpot_ms / tpot_ms}};
  if (random_rows) row["projection"] = "random rows";
  std::fprintf(stderr,
               "[bench] ctx %d batch %d %s (budget %d): TPOT %.3f ms vs Full %.3f ms (%.2fx), "
               "start %.1f ms\n",
               context, batch, selector.policy.c_str(), budget_tokens, tpot_ms, full_tpot_ms,
               full_tpot_ms / tpot_ms, start_ms);
  return row;
}

}  // namespace

nlohmann::json run_cuda_bench(const CudaBenchOptions& options) {
  if (!cuda_device_available()) throw InputError("bench on the GPU: no CUDA device is present");
  if (!options.prompt_text.empty() && options.model.empty())
    throw InputError(
        "bench on the GPU: --prompt-file needs --model PATH (a preset has no tokenizer)");
  const CudaDeviceInfo device = cuda_device_info();
  std::fprintf(stderr, "[bench] device %s, %d SMs, %.1f GiB\n", device.name.c_str(),
               device.sm_count, device.total_bytes / double(1 << 30));
  nlohmann::json out;
  out["device"] = {
      {"name", device.name}, {"sm_count", device.sm_count}, {"memory_bytes", device.total_bytes}};
  const double bandwidth_gbs = measure_cuda_read_bandwidth_gbs(size_t(4) << 30, 10);
  std::unique_ptr<CudaEngine> engine;
  std::vector<int32_t> prompt_ids;
  if (!options.preset.empty()) {
    engine = CudaEngine::from_preset(preset_config(options.preset), 1234);
  } else {
    // The tokenizer and config on the host, the weights straight from the file to the device.
    LoadedModel model = load_model(options.model, {.weights_on_host = false});
    engine = CudaEngine::from_source(*open_weight_source(options.model));
    if (!options.prompt_text.empty()) {
      const auto tokens = model.tokenizer->encode(options.prompt_text, false);
      prompt_ids.assign(tokens.begin(), tokens.end());
      if (prompt_ids.empty()) throw InputError("bench on the GPU: the prompt has no tokens");
    }
  }
  out["gemm_tflops"] = measure_cuda_gemm_tflops(8192, 5);
  out["read_bandwidth_gbs"] = bandwidth_gbs;
  const ModelConfig& config = engine->config();
  out["model"] = {{"name", config.name},
                  {"dummy_weights", config.dummy_weights},
                  {"weight_bytes", engine->weight_bytes()},
                  {"dtype", "bf16"}};
  out["policy"] = options.label;
  for (const SparseDecodeBench& selector : options.selectors)
    out["policy"] = out["policy"].get<std::string>() + "," + selector.policy;
  out["budget"] = options.budget ? options.budget->to_string() : "";
  std::fprintf(stderr,
               "[bench] read bandwidth %.0f GB/s, bf16 GEMM %.0f TFLOP/s, weights %.2f GB\n",
               bandwidth_gbs, out["gemm_tflops"].get<double>(), engine->weight_bytes() / 1e9);

  for (int context : options.contexts) {
    const int keep = kept_tokens(options, context);
    for (int batch : options.batches) {
      nlohmann::json row{{"context", context}, {"batch", batch}, {"kept_tokens", keep}};
      engine->reset_peak_bytes();
      engine->allocate_cache(batch, context + options.decode_steps + 2);
      // TTFT: prefill + (uniform) compression + first sampling, for sequence 0.
      const auto ids = prompt_ids.empty() ? random_ids(context, config.vocab_size, 7)
                                          : tiled_ids(prompt_ids, context);
      // Warm-up: one full prefill chunk, so the timed prefill finds its activation buffers
      // allocated and every kernel and GEMM shape initialised, as in a running server (the first
      // chunk's allocations and first launches had been inside the TTFT).
      engine->prefill(0, random_ids(std::min(context, options.prefill_chunk), config.vocab_size, 3),
                      options.prefill_chunk);
      engine->allocate_cache(batch, context + options.decode_steps + 2);
      const auto start = Clock::now();
      const auto logits = engine->prefill(0, ids, options.prefill_chunk);
      const double prefill_ms = ms_since(start);
      const auto compress_start = Clock::now();
      if (keep < context) engine->compact(0, recent_kept(config, context, keep));
      const double compress_ms = ms_since(compress_start);
      row["prefill_ms"] = prefill_ms;
      row["compress_ms"] = compress_ms;
      row["ttft_ms"] = prefill_ms + compress_ms;
      row["prefill_tokens_per_s"] = context / (prefill_ms / 1e3);
      // TPOT at this batch: every sequence holds `keep` entries, random or the real prompt's.
      // With a prompt, sequences from `first_prefill` on are prefilled (the earlier ones hold it).
      const int32_t first_token = argmax_token(logits);
      const auto fill_cache = [&](int first_prefill) {
        if (prompt_ids.empty()) {
          engine->fill_cache_random(keep, 11);
          engine->set_next_tokens(std::vector<int32_t>(batch, 1),
                                  std::vector<int32_t>(batch, context));
          return;
        }
        for (int seq = first_prefill; seq < batch; ++seq) {
          engine->prefill(seq, ids, options.prefill_chunk);
          if (keep < context) engine->compact(seq, recent_kept(config, context, keep));
        }
        engine->set_next_tokens(std::vector<int32_t>(batch, first_token),
                                std::vector<int32_t>(batch, context));
      };
      // Sequence 0 already holds the timed prefill, compressed.
      fill_cache(1);
      start_eviction(*engine, options, keep);
      const std::function<void()> reset_cache = [&] {
        if (!prompt_ids.empty()) engine->allocate_cache(batch, context + options.decode_steps + 2);
        fill_cache(0);
      };
      double tpot_ms = time_decode(*engine, options.decode_steps, options.use_graphs);
      if (options.early_exit) measure_early_exit(*engine, options, reset_cache, row, tpot_ms);
      for (const SparseDecodeBench& selector : options.selectors)
        row["selectors"].push_back(
            measure_selector(*engine, options, selector, reset_cache, context, keep, tpot_ms));
      const double kv_bytes = double(engine->kv_bytes());
      const double bound_ms = (engine->weight_bytes() + kv_bytes) / (bandwidth_gbs * 1e9) * 1e3;
      row["tpot_ms"] = tpot_ms;
      row["tpot_bound_ms"] = bound_ms;
      row["tpot_ratio_to_bound"] = tpot_ms / bound_ms;
      row["decode_tokens_per_s"] = batch / (tpot_ms / 1e3);
      row["kv_bytes"] = kv_bytes;
      row["peak_device_bytes"] = engine->device_peak_bytes();
      std::fprintf(
          stderr,
          "[bench] ctx %d batch %d kept %d: TTFT %.1f ms (prefill %.0f tok/s), TPOT %.3f ms "
          "(bound %.3f ms, ratio %.2f), KV %.2f GB\n",
          context, batch, keep, prefill_ms + compress_ms, context / (prefill_ms / 1e3), tpot_ms,
          bound_ms, tpot_ms / bound_ms, kv_bytes / 1e9);
      out["runs"].push_back(row);
    }
    if (options.find_max_batch) {
      const int capacity = keep + options.decode_steps + 2;
      const int max_batch = largest_batch(*engine, capacity);
      nlohmann::json row{{"context", context}, {"kept_tokens", keep}, {"max_batch", max_batch}};
      if (max_batch > 0) {
        engine->allocate_cache(max_batch, capacity);
        engine->fill_cache_random(keep, 13);
        engine->set_next_tokens(std::vector<int32_t>(max_batch, 1),
                                std::vector<int32_t>(max_batch, context));
        start_eviction(*engine, options, keep);
        const double tpot_ms =
            time_decode(*engine, std::max(8, options.decode_steps / 4), options.use_graphs);
        row["tpot_ms"] = tpot_ms;
        row["decode_tokens_per_s"] = max_batch / (tpot_ms / 1e3);
        row["kv_bytes"] = double(engine->kv_bytes());
      }
      std::fprintf(stderr, "[bench] ctx %d kept %d: largest batch %d, decode %.0f tok/s\n", context,
                   keep, max_batch, row.value("decode_tokens_per_s", 0.0));
      out["max_batch"].push_back(row);
    }
  }
  return out;
}

}  // namespace kvb

#endif  // KVB_HAVE_CUDA
