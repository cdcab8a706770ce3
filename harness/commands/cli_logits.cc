// kvbench logits --model PATH --ids 1,2,3 [--top-k K] [--all] [--json]
// Last-position logits of a full-attention prefill of the given ids on the CPU engine.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common/errors.h"
#include "engine/engine_factory.h"
#include "engine/model.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/commands/cpu_options.h"

namespace kvb::cli {
namespace {

std::string token_text(const Tokenizer* tokenizer, int id) {
  return tokenizer != nullptr ? tokenizer->token_text(id) : std::string();
}

}  // namespace

int logits(const std::vector<std::string>& argv) {
  Args args("logits", argv, {"json", "all"});
  args.allow_only(with_cpu_options({"model", "ids", "top-k", "all", "device", "json"}));
  const ThreadLimit threads(args);
  const std::vector<TokenId> ids = args.get_indices("ids", "token ids");
  const int top_k = args.get_int("top-k", 10);
  if (top_k < 1) throw InputError("kvbench logits: --top-k must be >= 1");
  const std::string device = resolve_device(args.get_or("device", "cpu"));
  // On the GPU the weights go from the file to the device, with no f32 copy on the host.
  const LoadedModel model = load_model(
      args.get("model"),
      {.weights_on_host = device != "cuda", .weight_format = weight_format_option(args)});
  // The loader may leave a GGUF's tokenizer out; the token texts are only for display.
  std::shared_ptr<const Tokenizer> tokenizer = model.tokenizer;
  if (!tokenizer && args.get("model").rfind("preset:", 0) != 0)
    tokenizer = tokenizer_from_path(args.get("model"));
  // The CPU engine by default (--weights f32: the f32 reference, its KV cache f32 unless
  // --kv-dtype or --numerics bf16-device says otherwise); --device cuda gives the GPU's bf16
  // logits.
  CpuEngineOptions cpu = cpu_engine_options(args);
  if (device != "cuda" && !cpu.kv_dtype && cpu.numerics != ForwardPrecision::kBf16Device)
    cpu.kv_dtype = KvDtype::kF32;
  const std::unique_ptr<Engine> engine = make_engine(device, *model.weights, cpu);
  engine->reserve(1, static_cast<int>(ids.size()));
  PrefillCapture unused;
  const std::vector<float> logits = engine->prefill(0, ids, CaptureRequest{}, unused);

  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const int k = std::min<int>(top_k, static_cast<int>(order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  order.resize(k);

  if (args.flag("json")) {
    nlohmann::json out = {
        {"model", model.weights->source}, {"ids", ids}, {"vocab_size", logits.size()}};
    nlohmann::json top = nlohmann::json::array();
    for (int id : order)
      top.push_back(
          {{"id", id}, {"logit", logits[id]}, {"token", token_text(tokenizer.get(), id)}});
    out["top"] = top;
    if (args.flag("all")) out["logits"] = logits;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("last-position logits after %zu tokens (%s)\n", ids.size(),
              model.weights->source.c_str());
  for (int r = 0; r < k; ++r)
    std::printf("%3d  id %6d  logit %10.4f  %s\n", r + 1, order[r], logits[order[r]],
                nlohmann::json(token_text(tokenizer.get(), order[r]))
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  return 0;
}

}  // namespace kvb::cli
