#include "harness/bench/bench_gpu.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/errors.h"
#include "engine/cache_policy.h"
#include "engine/kv_store.h"
#include "harness/commands/cpu_options.h"
#include "policies/registry.h"
#ifdef KVB_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#include "harness/bench/bench_cuda.h"
#endif

namespace kvb {

const std::set<std::string>& bench_flags() {
  static const std::set<std::string> flags =
      with_cpu_options({"device", "model", "preset", "dummy", "context", "batch", "policy",
                        "budget", "params", "decode-tokens", "max-batch", "no-graphs",
                        "prompt-file", "prefill-chunk", "json", "no-ceilings"});
  return flags;
}

std::vector<int> positive_int_list(const Args& args, const std::string& key,
                                   std::vector<int> fallback) {
  auto text = args.maybe(key);
  if (!text) return fallback;
  std::vector<int> out;
  std::stringstream stream(*text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      size_t used = 0;
      const int value = std::stoi(item, &used);
      if (used != item.size() || value <= 0) throw std::invalid_argument(item);
      out.push_back(value);
    } catch (const std::exception&) {
      throw InputError("--" + key + " expects positive integers separated by commas, got '" +
                       *text + "'");
    }
  }
  return out;
}

bool gpu_bench_requested(const Args& args) {
  const std::string device = args.get_or("device", "auto");
  if (device == "cuda") return true;
  if (device == "cpu") return false;
  if (device != "auto")
    throw InputError("--device must be cpu, cuda or auto, got '" + device + "'");
#ifdef KVB_HAVE_CUDA
  return args.has("preset") && cuda_device_available();
#else
  return false;
#endif
}

#ifdef KVB_HAVE_CUDA
namespace {

std::vector<std::string> policy_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) out.push_back(item);
  return out;
}

// Whether a component of the policy string ("a+b") is a decode selector (kind D): the bench then
// gives it a default budget, as the selector papers measure at 2,048 tokens.
bool selects_at_decode(const std::string& policy) {
  std::stringstream stream(policy);
  for (std::string part; std::getline(stream, part, '+');)
    if (find_policy(part).info.kind == PolicyKind::kDecodeSelection) return true;
  return false;
}

// The device form of a plan's decode selector, timed on the full cache beside Full.
SparseDecodeBench selector_bench(const std::string& policy, const CachePlan& plan,
                                 const Budget& budget) {
  if (plan.prefill || plan.early_exit || plan.decode_eviction)
    throw InputError("bench on the GPU times a decode selector on the full cache, alone; '" +
                     policy + "' composes it with other methods (bench those apart)");
  if (!plan.selector->runs_on_device()) {
    const std::string name = plan.selector->name();
    throw InputError("bench on the GPU: decode selector '" + name + "'" +
                     (name == policy ? "" : " of '" + policy + "'") +
                     " has no device form; bench it with --device cpu");
  }
  return {plan.label.empty() ? policy : plan.label, plan.selector, budget};
}

// What --policy asks for, from the plan the sweep builds for the same string: a prefill policy
// shapes the cache, early exit walks each decode step, decode selectors are timed on the full
// cache beside Full ("full,A,B" lists several). Decode-time eviction runs in the timed steps where
// it has a device form, alone.
void apply_policy(const std::string& policy, const nlohmann::json& params,
                  CudaBenchOptions& options) {
  const std::vector<std::string> policies = policy_list(policy);
  if (policies.empty()) throw InputError("--policy is empty (e.g. --policy full)");
  const bool listed = policies.size() > 1;
  std::optional<Budget> budget = options.budget;
  for (const std::string& one : policies)
    if (!budget && selects_at_decode(one)) budget = Budget::parse("2048");
  for (const std::string& one : policies) {
    if (listed && one == "full") continue;
    const CachePlan plan = make_cache_plan(one, params, budget);
    if (plan.decode_eviction && (!plan.decode_eviction->runs_on_device() || plan.early_exit))
      throw InputError("bench on the GPU: '" + one +
                       "' evicts during decode without a device form (or beside ART), which runs "
                       "on the CPU engine only; bench it with --device cpu");
    if (plan.selector) {
      options.selectors.push_back(selector_bench(one, plan, *budget));
      continue;
    }
    if (listed)
      throw InputError("bench on the GPU: a policy list holds full and decode selectors; '" + one +
                       "' is neither (run it with its own --policy)");
    options.label = plan.label.empty() ? one : plan.label;
    options.compress_prefill = plan.prefill != nullptr;
    options.early_exit = plan.early_exit;
    options.decode_eviction = plan.decode_eviction;
  }
  if (!options.selectors.empty()) {
    options.label = "full";
    options.budget.reset();
  }
}

// The text of `path` (the bench tokenizes it with the model it loads, and refuses it with a
// preset).
std::string prompt_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("--prompt-file " + path + ": cannot open the file");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (text.empty()) throw InputError("--prompt-file " + path + " holds no text to tokenize");
  return text;
}

int print_gpu_bench(const nlohmann::json& result, bool json);

}  // namespace
#endif

int run_gpu_bench(const Args& args) {
#ifndef KVB_HAVE_CUDA
  (void)args;
  throw InputError(
      "this kvbench was built without CUDA (configure with -DKVB_CUDA=ON on a machine "
      "with nvcc)");
#else
  args.allow_only(bench_flags());
  // The CPU engine's options (harness/commands/cpu_options.h) and its measured ceilings.
  for (const std::string& flag : with_cpu_options({"no-ceilings"}))
    if (args.has(flag))
      throw InputError(std::string("kvbench bench: --") + flag +
                       " is an option of the CPU engine only (--device cpu)");
  CudaBenchOptions options;
  options.preset = args.get_or("preset", "");
  options.model = args.get_or("model", "");
  if (options.preset.empty() == options.model.empty())
    throw InputError("bench on the GPU needs exactly one of --model PATH or --preset NAME");
  if (auto prompt_file = args.maybe("prompt-file")) options.prompt_text = prompt_text(*prompt_file);
  options.contexts = positive_int_list(args, "context", {4096});
  options.batches = positive_int_list(args, "batch", {1});
  if (auto budget = args.maybe("budget")) options.budget = Budget::parse(*budget);
  nlohmann::json params = nlohmann::json::object();
  if (auto text = args.maybe("params")) params = nlohmann::json::parse(*text, nullptr, false);
  if (params.is_discarded()) throw InputError("kvbench bench: --params is not valid JSON");
  options.decode_steps = args.get_int("decode-tokens", 64);
  if (options.decode_steps < 1) throw InputError("--decode-tokens must be >= 1");
  options.prefill_chunk = args.get_int("prefill-chunk", options.prefill_chunk);
  if (options.prefill_chunk < 1)
    throw InputError("--prefill-chunk must be >= 1 token (default " +
                     std::to_string(CudaEngine::kPrefillChunk) + "), got " +
                     std::to_string(options.prefill_chunk));
  options.find_max_batch = args.flag("max-batch");
  options.use_graphs = !args.flag("no-graphs");
  apply_policy(args.get_or("policy", "full"), params, options);
  return print_gpu_bench(run_cuda_bench(options), args.flag("json"));
#endif
}

#ifdef KVB_HAVE_CUDA
namespace {
int print_gpu_bench(const nlohmann::json& result, bool json) {
  if (json) {
    std::printf("%s\n", result.dump(2).c_str());
    return 0;
  }
  std::printf(
      "device %s: read %.0f GB/s, bf16 GEMM %.0f TFLOP/s; model %s (%s), weights %.2f GB; "
      "policy %s\n",
      result["device"]["name"].get<std::string>().c_str(),
      result["read_bandwidth_gbs"].get<double>(), result["gemm_tflops"].get<double>(),
      result["model"]["name"].get<std::string>().c_str(),
      result["model"]["dummy_weights"].get<bool>() ? "dummy weights" : "real weights",
      result["model"]["weight_bytes"].get<double>() / 1e9,
      result["policy"].get<std::string>().c_str());
  std::printf("%8s %6s %8s %10s %10s %10s %10s %8s %10s %10s\n", "context", "batch", "kept",
              "TTFT ms", "prefill/s", "TPOT ms", "bound ms", "ratio", "KV GB", "peak GB");
  for (const auto& row : result.value("runs", nlohmann::json::array()))
    std::printf("%8d %6d %8d %10.1f %10.0f %10.3f %10.3f %8.2f %10.2f %10.2f\n",
                row["context"].get<int>(), row["batch"].get<int>(), row["kept_tokens"].get<int>(),
                row["ttft_ms"].get<double>(), row["prefill_tokens_per_s"].get<double>(),
                row["tpot_ms"].get<double>(), row["tpot_bound_ms"].get<double>(),
                row["tpot_ratio_to_bound"].get<double>(), row["kv_bytes"].get<double>() / 1e9,
                row["peak_device_bytes"].get<double>() / 1e9);
  for (const auto& row : result.value("runs", nlohmann::json::array()))
    if (row.contains("art_speedup"))
      std::printf(
          "context %d batch %d: ART TPOT %.3f ms vs %.3f ms without ART (speed-up %.3fx), "
          "KV blocks skipped %.4f, tiles never fetched %.4f\n",
          row["context"].get<int>(), row["batch"].get<int>(), row["tpot_ms"].get<double>(),
          row["tpot_without_art_ms"].get<double>(), row["art_speedup"].get<double>(),
          row["art_blocks_skipped"].get<double>(), row["art_work_skipped"].get<double>());
  for (const auto& row : result.value("max_batch", nlohmann::json::array()))
    std::printf("context %d, %d kept tokens: largest batch %d, decode %.0f tokens/s\n",
                row["context"].get<int>(), row["kept_tokens"].get<int>(),
                row["max_batch"].get<int>(), row.value("decode_tokens_per_s", 0.0));
  for (const auto& row : result.value("runs", nlohmann::json::array())) {
    if (!row.contains("selectors")) continue;
    std::printf("context %d batch %d: TPOT full %.3f ms", row["context"].get<int>(),
                row["batch"].get<int>(), row["tpot_ms"].get<double>());
    for (const auto& s : row["selectors"])
      std::printf(" | %s %.3f ms (%.2fx vs full, budget %d)",
                  s["policy"].get<std::string>().c_str(), s["tpot_ms"].get<double>(),
                  s["speedup_vs_full"].get<double>(), s["budget_tokens"].get<int>());
    std::printf("\n");
  }
  return 0;
}

}  // namespace
#endif

}  // namespace kvb
