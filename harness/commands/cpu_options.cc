#include "harness/commands/cpu_options.h"

#include "common/errors.h"
#include "engine/cpu/blas.h"

namespace kvb {

const std::set<std::string>& cpu_option_names() {
  static const std::set<std::string> names = {"threads", "weights", "kv-dtype", "numerics"};
  return names;
}

std::set<std::string> with_cpu_options(std::set<std::string> flags) {
  flags.insert(cpu_option_names().begin(), cpu_option_names().end());
  return flags;
}

ThreadLimit::ThreadLimit(const Args& args) {
  if (!args.has("threads")) return;
  const int threads = args.get_int("threads");
  if (threads < 1)
    throw InputError("kvbench " + args.command() + ": --threads must be >= 1 (got " +
                     std::to_string(threads) + ")");
  control_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                   static_cast<size_t>(threads));
  set_cpu_blas_threads(threads);
}

ThreadLimit::~ThreadLimit() = default;

WeightFormat weight_format_option(const Args& args) {
  const std::string value = args.get_or("weights", "stored");
  if (value == "stored") return WeightFormat::kAsStored;
  if (value == "f32") return WeightFormat::kF32;
  throw InputError("kvbench " + args.command() + ": --weights '" + value +
                   "' is not one of stored (the file's encoding) or f32 (the reference)");
}

CpuEngineOptions cpu_engine_options(const Args& args) {
  CpuEngineOptions options;
  if (const auto value = args.maybe("kv-dtype")) {
    options.kv_dtype = parse_kv_dtype(*value);
    if (!options.kv_dtype)
      throw InputError("kvbench " + args.command() + ": --kv-dtype '" + *value +
                       "' is not one of f32, f16 or bf16 (the KV cache's element type)");
  }
  if (const auto value = args.maybe("numerics")) {
    options.numerics = parse_forward_precision(*value);
    if (!options.numerics)
      throw InputError("kvbench " + args.command() + ": --numerics '" + *value +
                       "' is not one of f32 or bf16-device (the CUDA engine's rounding points)");
  }
  return options;
}

}  // namespace kvb
