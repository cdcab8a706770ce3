// kvbench bench --model PATH | --preset NAME [--dummy] [--context N[,N...]] [--batch B[,B...]]
//               [--decode-tokens N] [--device cpu|cuda|auto] [--policy P --budget B]
//               [--params JSON] [--max-batch] [--no-graphs] [--prompt-file FILE]
//               [--prefill-chunk N] [--json] [--threads N] [--weights stored|f32] [--kv-dtype D]
//               [--no-ceilings]
// One set of flags on both devices (harness/bench/bench_gpu.h); a flag a device cannot honour is
// refused there by name. On the GPU (harness/bench/bench_gpu.cc) --policy also takes a list of full
// and decode selectors with a device form (full,A,B): TPOT of each on the same cache, with its
// ratio to Full. CPU figures: prefill tokens/s at 512 and 2,048 tokens (or at each --context),
// decode tokens/s after a prefill of the first length (TTFT/TPOT/KV bytes under the policy), each
// beside a ceiling measured in the same run: prefill FLOP/s against this machine's sgemm, decode
// bytes/s against its memory read bandwidth (--no-ceilings leaves the ceilings out).
#include <tbb/global_control.h>
#include <tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "common/errors.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/forward.h"
#include "engine/engine_factory.h"
#include "engine/generation.h"
#include "engine/model.h"
#include "harness/bench/bench_gpu.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/commands/cpu_options.h"
#include "policies/registry.h"

#ifndef KVB_BUILD_TYPE
#define KVB_BUILD_TYPE "unknown"
#endif

namespace kvb::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Threads the TBB pool runs now (after --threads).
int worker_threads() {
  return static_cast<int>(
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<TokenId> random_ids(int n, int vocab) {
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<TokenId> ids(n);
  for (auto& id : ids) id = pick(rng);
  return ids;
}

// Bytes of weights one decode step reads: every layer's matrices (as stored) and norms, and the
// output matrix (the embedding table is only indexed, unless it is the tied output).
int64_t decode_weight_bytes(const ModelWeights& w) {
  constexpr int64_t kFloat = sizeof(float);
  int64_t bytes =
      w.output_matrix().storage_bytes() + static_cast<int64_t>(w.output_norm.size()) * kFloat;
  for (const auto& l : w.layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      bytes += m->storage_bytes();
    bytes += static_cast<int64_t>(l.attn_norm.size() + l.ffn_norm.size() + l.bq.size() +
                                  l.bk.size() + l.bv.size()) *
             kFloat;
  }
  return bytes;
}

int64_t parameter_count(const ModelWeights& w) {
  int64_t n = w.token_embedding.size() + w.output_norm.size() + w.output.size();
  for (const auto& l : w.layers)
    n += l.attn_norm.size() + l.wq.size() + l.wk.size() + l.wv.size() + l.bq.size() + l.bk.size() +
         l.bv.size() + l.wo.size() + l.ffn_norm.size() + l.w_gate.size() + l.w_up.size() +
         l.w_down.size();
  return n;
}

// FLOPs of a T-token prefill: 2 per layer weight per token, the output matrix for the last token
// only, plus causal attention (QK^T and PV over T(T+1)/2 pairs per query head).
double prefill_flops(const ModelConfig& c, int64_t layer_params, int64_t output_params, int T) {
  const double attention = 2.0 * 2.0 * c.n_layers * c.n_query_heads * c.head_dim *
                           (static_cast<double>(T) * (T + 1) / 2);
  return 2.0 * layer_params * T + 2.0 * output_params + attention;
}

// The CPU bench decodes one sequence from a prefill of its own, through the generic Generator.
void refuse_gpu_only_flags(const Args& args) {
  for (const char* flag : {"max-batch", "no-graphs", "prompt-file", "prefill-chunk"})
    if (args.has(flag))
      throw InputError(std::string("kvbench bench: --") + flag +
                       " is measured on the CUDA engine only (--device cuda)");
  const std::vector<int> batches = positive_int_list(args, "batch", {1});
  if (batches != std::vector<int>{1})
    throw InputError(
        "kvbench bench: the CPU engine runs batch 1 only (--batch 1, or --device cuda)");
}

}  // namespace

int bench(const std::vector<std::string>& argv) {
  Args args("bench", argv, {"json", "dummy", "max-batch", "no-graphs", "no-ceilings"});
  args.allow_only(bench_flags());
  // The GPU path: --device cuda, or --preset with a GPU present.
  if (gpu_bench_requested(args)) return run_gpu_bench(args);
  refuse_gpu_only_flags(args);
  const ThreadLimit threads(args);
  if (args.has("model") == args.has("preset"))
    throw InputError("kvbench bench: give exactly one of --model PATH or --preset NAME");
  const std::string source = args.has("model") ? args.get("model") : "preset:" + args.get("preset");
  const int decode_tokens = args.get_int("decode-tokens", 32);
  if (decode_tokens < 2) throw InputError("kvbench bench: --decode-tokens must be >= 2");
  std::optional<Budget> budget;
  if (auto text = args.maybe("budget")) budget = Budget::parse(*text);
  nlohmann::json params = nlohmann::json::object();
  if (auto text = args.maybe("params")) params = nlohmann::json::parse(*text, nullptr, false);
  if (params.is_discarded()) throw InputError("kvbench bench: --params is not valid JSON");
  const std::string policy = args.get_or("policy", "full");
  if (policy.find(',') != std::string::npos)
    throw InputError("kvbench bench: a policy list (" + policy +
                     ") is timed on the GPU only (--device cuda); on the CPU give one policy");
  CachePlan plan = make_cache_plan(policy, params, budget);

  const LoadedModel model = load_model(source, {.weight_format = weight_format_option(args)});
  const ModelWeights& weights = *model.weights;
  const ModelConfig& c = weights.config;
  const std::vector<int> lengths = positive_int_list(args, "context", {512, 2048});
  for (int T : lengths) {
    if (T < 2) throw InputError("kvbench bench: --context must be >= 2");
    if (c.max_context > 0 && T + decode_tokens > c.max_context)
      throw CapacityError("kvbench bench: context " + std::to_string(T) + " + " +
                          std::to_string(decode_tokens) + " decode tokens exceeds the " +
                          std::to_string(c.max_context) + "-token context of " + c.name);
  }
  const CpuEngineOptions cpu = cpu_engine_options(args);
  CpuEngine engine(weights, cpu_kv_dtype(cpu), cpu.numerics.value_or(ForwardPrecision::kF32));
  const int64_t params_total = parameter_count(weights);
  // Parameters a prefill multiplies by (FLOPs): every layer's, and the output matrix's for the last
  // token (the embedding table is only indexed, unless it is tied to the output).
  const int64_t output_params = static_cast<int64_t>(weights.output_matrix().size());
  const int64_t layer_params = params_total - static_cast<int64_t>(weights.token_embedding.size()) -
                               static_cast<int64_t>(weights.output.size());
  // The ceilings' 512 MiB read buffer would dominate the peak RSS: --no-ceilings (for measuring
  // the engine's own memory) leaves them out, and the ratios to them read 0.
  const bool ceilings = !args.flag("no-ceilings");
  const double read_bandwidth = ceilings ? measure_read_bandwidth(size_t(512) << 20) : 0.0;
  const double sgemm_flops = ceilings ? measure_sgemm_flops(512, c.d_model, c.ffn_dim) : 0.0;
  const auto ratio = [](double value, double ceiling) {
    return ceiling > 0 ? value / ceiling : 0.0;
  };

  nlohmann::json prefill = nlohmann::json::array();
  for (int T : lengths) {
    const auto ids = random_ids(T, c.vocab_size);
    KvStore store = engine.make_store();
    engine.forward_chunk(std::span(ids).first(std::min(T, 16)), store, {}, nullptr, 0);  // warm-up
    store = engine.make_store();
    const auto start = Clock::now();
    engine.forward_chunk(ids, store, {}, nullptr, 0);
    const double seconds = seconds_since(start);
    const double flops = prefill_flops(c, layer_params, output_params, T) / seconds;
    prefill.push_back({{"tokens", T},
                       {"ms", seconds * 1e3},
                       {"tokens_per_s", T / seconds},
                       {"gflops", flops / 1e9},
                       {"ratio_to_sgemm", ratio(flops, sgemm_flops)}});
  }

  // Decode after a prefill of the first length, under the plan; the prompt is random ids, so no
  // stop token is honoured (no tokenizer): exactly decode_tokens tokens are sampled.
  Generator generator(engine, nullptr);
  GenerationOptions options;
  options.max_new_tokens = decode_tokens;
  const int context = lengths.front();
  const GenerationResult r = generator.generate(random_ids(context, c.vocab_size), plan, options);
  const double decode_tps = 1e3 / r.tpot_ms;
  const double bytes_per_token =
      static_cast<double>(decode_weight_bytes(weights)) + static_cast<double>(r.kv_bytes_end);
  const double decode_bandwidth = bytes_per_token * decode_tps;

  nlohmann::json out = {{"model", weights.source},
                        {"dummy_weights", c.dummy_weights},
                        {"backend", "cpu"},
                        {"build_type", KVB_BUILD_TYPE},
                        {"threads", worker_threads()},
                        {"weights", weights.weight_dtypes},
                        {"kv_dtype", kv_dtype_name(engine.kv_dtype())},
                        {"blas_threads", cpu_blas_threads()},
                        {"parameters", params_total},
                        {"weights_bytes_f32", params_total * 4},
                        {"decode_weight_bytes", decode_weight_bytes(weights)},
                        {"measured_read_gbps", read_bandwidth / 1e9},
                        {"measured_sgemm_gflops", sgemm_flops / 1e9},
                        {"prefill", prefill},
                        {"decode",
                         {{"context", context},
                          {"tokens", r.output_tokens},
                          {"policy", plan.label.empty() ? policy : plan.label},
                          {"budget", budget ? budget->to_string() : ""},
                          {"ttft_ms", r.ttft_ms},
                          {"tpot_ms", r.tpot_ms},
                          {"tokens_per_s", decode_tps},
                          {"compress_ms", r.compress_ms},
                          {"kv_bytes", r.kv_bytes},
                          {"kv_bytes_full", r.kv_bytes_full},
                          {"bytes_per_token", bytes_per_token},
                          {"achieved_gbps", decode_bandwidth / 1e9},
                          {"ratio_to_read_bandwidth", ratio(decode_bandwidth, read_bandwidth)}}},
                        {"peak_rss_bytes", peak_rss_bytes()}};
  if (args.flag("json")) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "kvbench bench  %s%s  (cpu, %s build, %d threads, OpenBLAS %d threads, %s KV cache)\n",
      weights.source.c_str(), c.dummy_weights ? " [dummy weights]" : "", KVB_BUILD_TYPE,
      worker_threads(), cpu_blas_threads(), kv_dtype_name(engine.kv_dtype()).c_str());
  std::printf("ceilings measured now: sgemm %.1f GFLOP/s, memory read %.1f GB/s\n",
              sgemm_flops / 1e9, read_bandwidth / 1e9);
  for (const auto& p : prefill)
    std::printf("prefill %5d tokens: %8.1f tokens/s  (%.0f ms, %.1f GFLOP/s = %.2f of sgemm)\n",
                p["tokens"].get<int>(), p["tokens_per_s"].get<double>(), p["ms"].get<double>(),
                p["gflops"].get<double>(), p["ratio_to_sgemm"].get<double>());
  std::printf(
      "decode after %d tokens [%s]: %.1f tokens/s (TPOT %.2f ms, TTFT %.1f ms), "
      "%.2f GB/s = %.2f of read bandwidth, KV %.2f MB\n",
      context, plan.label.empty() ? policy.c_str() : plan.label.c_str(), decode_tps, r.tpot_ms,
      r.ttft_ms, decode_bandwidth / 1e9, ratio(decode_bandwidth, read_bandwidth), r.kv_bytes / 1e6);
  return 0;
}

}  // namespace kvb::cli
