#include "harness/bench_gpu.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "engine/cache_policy.h"
#include "engine/errors.h"
#include "policies/registry.h"
#ifdef KVB_HAVE_CUDA
#include "engine/cuda/cuda_bench.h"
#include "engine/cuda/cuda_engine.h"
#endif

namespace kvb {
namespace {

std::vector<int> int_list(const Args& args, const std::string& key, std::vector<int> fallback) {
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
      throw InputError("--" + key + " expects positive integers separated by commas, got '" + *text + "'");
    }
  }
  return out;
}

#ifdef KVB_HAVE_CUDA
std::vector<std::string> policy_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) out.push_back(item);
  return out;
}

// "--policy full,A,B": Full's row on the full cache and every decode selector that runs on the
// device on the same cache beside it. Budget default 2,048 tokens; --params go to each.
void add_selectors(const std::vector<std::string>& policies, const nlohmann::json& params,
                   CudaBenchOptions& options) {
  const Budget budget = options.budget.value_or(Budget::parse("2048"));
  for (const std::string& policy : policies) {
    if (policy == "full") continue;
    const CachePlan plan = make_cache_plan(policy, params, budget);
    if (!plan.selector || plan.prefill || plan.early_exit || plan.decode_eviction)
      throw InputError("bench on the GPU: a policy list holds full and decode selectors only; '" +
                       policy + "' is not a decode selector; run it with its own --policy");
    // No prompt cache here: a selector that fits its rows to the prompt gets random ones.
    const std::optional<DeviceSelectionSpec> spec =
        plan.selector->device_selection(KvStore(), budget.tokens_for(4096));
    if (!plan.selector->runs_on_device() || !spec)
      throw InputError("bench on the GPU: decode selector '" + policy +
                       "' has no device form; bench it with --device cpu");
    options.selectors.push_back({plan.label.empty() ? policy : plan.label, *spec, budget});
  }
  options.policy = "full";
  options.budget.reset();
}

// The text of `path` (the bench tokenizes it with the model it loads, and refuses it with a preset).
std::string prompt_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("--prompt-file " + path + ": cannot open the file");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (text.empty()) throw InputError("--prompt-file " + path + " holds no text to tokenize");
  return text;
}
#endif

}  // namespace

bool gpu_bench_requested(const Args& args) {
  const std::string device = args.get_or("device", "auto");
  if (device == "cuda") return true;
  if (device == "cpu") return false;
  if (device != "auto") throw InputError("--device must be cpu, cuda or auto, got '" + device + "'");
#ifdef KVB_HAVE_CUDA
  return args.has("preset") && cuda_device_available();
#else
  return false;
#endif
}

#ifdef KVB_HAVE_CUDA
int print_gpu_bench(const nlohmann::json& result, bool json);
#endif

int run_gpu_bench(const Args& args) {
#ifndef KVB_HAVE_CUDA
  (void)args;
  throw InputError("this kvbench was built without CUDA (configure with -DKVB_CUDA=ON on a machine "
                   "with nvcc)");
#else
  args.allow_only({"device", "model", "preset", "dummy", "context", "batch", "policy", "budget",
                   "params", "steps", "max-batch", "no-graphs", "prompt-file", "prefill-chunk",
                   "json"});
  CudaBenchOptions options;
  options.preset = args.get_or("preset", "");
  options.model = args.get_or("model", "");
  if (options.preset.empty() == options.model.empty())
    throw InputError("bench on the GPU needs exactly one of --model PATH or --preset NAME");
  if (auto prompt_file = args.maybe("prompt-file"))
    options.prompt_text = prompt_text(*prompt_file);
  options.contexts = int_list(args, "context", {4096});
  options.batches = int_list(args, "batch", {1});
  options.policy = args.get_or("policy", "full");
  if (auto budget = args.maybe("budget")) options.budget = Budget::parse(*budget);
  nlohmann::json params = nlohmann::json::object();
  if (auto text = args.maybe("params")) params = nlohmann::json::parse(*text, nullptr, false);
  if (params.is_discarded()) throw InputError("kvbench bench: --params is not valid JSON");
  options.decode_steps = args.get_int("steps", 64);
  options.prefill_chunk = args.get_int("prefill-chunk", options.prefill_chunk);
  if (options.prefill_chunk < 1)
    throw InputError("--prefill-chunk must be >= 1 token (default " +
                     std::to_string(CudaEngine::kPrefillChunk) + "), got " +
                     std::to_string(options.prefill_chunk));
  options.find_max_batch = args.flag("max-batch");
  options.use_graphs = !args.flag("no-graphs");
  const std::vector<std::string> policies = policy_list(options.policy);
  const bool one_selector = options.policy.find('+') == std::string::npos &&
                            find_policy(options.policy).info.kind == PolicyKind::kDecodeSelection;
  if (policies.size() > 1 || one_selector) {
    add_selectors(policies, params, options);
    return print_gpu_bench(run_cuda_bench(options), args.flag("json"));
  }
  // "X+art": X shapes the cache as without ART; the decode step walks with early exit.
  const CachePlan plan = make_cache_plan(options.policy, params, options.budget);
  options.early_exit = plan.early_exit;
  const std::string suffix = "+art";
  if (plan.early_exit) {
    if (options.policy.size() <= suffix.size() ||
        options.policy.compare(options.policy.size() - suffix.size(), suffix.size(), suffix) != 0)
      throw InputError("bench on the GPU: write ART as the last component (e.g. snapkv+art), got '" +
                       options.policy + "'");
    options.policy.resize(options.policy.size() - suffix.size());
  }
  if (options.policy != "full" && !options.budget)
    throw InputError("--policy " + options.policy + " needs --budget (e.g. --budget 5%)");
  return print_gpu_bench(run_cuda_bench(options), args.flag("json"));
#endif
}

#ifdef KVB_HAVE_CUDA
int print_gpu_bench(const nlohmann::json& result, bool json) {
  if (json) {
    std::printf("%s\n", result.dump(2).c_str());
    return 0;
  }
  std::printf("device %s: read %.0f GB/s, bf16 GEMM %.0f TFLOP/s; model %s (%s), weights %.2f GB; "
              "policy %s\n",
              result["device"]["name"].get<std::string>().c_str(),
              result["read_bandwidth_gbs"].get<double>(), result["gemm_tflops"].get<double>(),
              result["model"]["name"].get<std::string>().c_str(),
              result["model"]["dummy_weights"].get<bool>() ? "dummy weights" : "real weights",
              result["model"]["weight_bytes"].get<double>() / 1e9,
              result["policy"].get<std::string>().c_str());
  std::printf("%8s %6s %8s %10s %10s %10s %10s %8s %10s %10s\n", "context", "batch", "kept", "TTFT ms",
              "prefill/s", "TPOT ms", "bound ms", "ratio", "KV GB", "peak GB");
  for (const auto& row : result.value("runs", nlohmann::json::array()))
    std::printf("%8d %6d %8d %10.1f %10.0f %10.3f %10.3f %8.2f %10.2f %10.2f\n", row["context"].get<int>(),
                row["batch"].get<int>(), row["kept_tokens"].get<int>(), row["ttft_ms"].get<double>(),
                row["prefill_tokens_per_s"].get<double>(), row["tpot_ms"].get<double>(),
                row["tpot_bound_ms"].get<double>(), row["tpot_ratio_to_bound"].get<double>(),
                row["kv_bytes"].get<double>() / 1e9, row["peak_device_bytes"].get<double>() / 1e9);
  for (const auto& row : result.value("runs", nlohmann::json::array()))
    if (row.contains("art_speedup"))
      std::printf("context %d batch %d: ART TPOT %.3f ms vs %.3f ms without ART (speed-up %.3fx), "
                  "KV blocks skipped %.4f, tiles never fetched %.4f\n",
                  row["context"].get<int>(), row["batch"].get<int>(), row["tpot_ms"].get<double>(),
                  row["tpot_without_art_ms"].get<double>(), row["art_speedup"].get<double>(),
                  row["art_blocks_skipped"].get<double>(), row["art_work_skipped"].get<double>());
  for (const auto& row : result.value("max_batch", nlohmann::json::array()))
    std::printf("context %d, %d kept tokens: largest batch %d, decode %.0f tokens/s\n",
                row["context"].get<int>(), row["kept_tokens"].get<int>(), row["max_batch"].get<int>(),
                row.value("decode_tokens_per_s", 0.0));
  for (const auto& row : result.value("runs", nlohmann::json::array())) {
    if (!row.contains("selectors")) continue;
    std::printf("context %d batch %d: TPOT full %.3f ms", row["context"].get<int>(),
                row["batch"].get<int>(), row["tpot_ms"].get<double>());
    for (const auto& s : row["selectors"])
      std::printf(" | %s %.3f ms (%.2fx vs full, budget %d)", s["policy"].get<std::string>().c_str(),
                  s["tpot_ms"].get<double>(), s["speedup_vs_full"].get<double>(),
                  s["budget_tokens"].get<int>());
    std::printf("\n");
  }
  return 0;
}
#endif

}  // namespace kvb
