// Command-line options of the CPU engine shared by bench, generate, logits and run:
//   --threads N            worker threads of the TBB pool and of OpenBLAS (default: every core the
//                          process may run on)
//   --weights stored|f32   weight matrices as the model file stores them (default: GGUF blocks,
//                          f16, bf16) or dequantised to f32 (the reference the NumPy tests compare)
//   --kv-dtype f32|f16|bf16  the KV cache's element type (default: engine/engine_factory.h's
//                          kDefaultCpuKvDtype; the CUDA engine's cache is bf16)
//   --numerics f32|bf16-device  the forward's rounding: f32 (default) or the CUDA engine's bf16
//                          rounding points (engine/cpu/device_numerics.h), to tell a
//                          GPU-against-CPU difference that is numerics from one that is code
#pragma once

#include <tbb/global_control.h>

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "engine/engine_factory.h"
#include "engine/kv_store.h"
#include "engine/weight_matrix.h"
#include "harness/commands/args.h"

namespace kvb {

// The CPU options' names (without "--").
const std::set<std::string>& cpu_option_names();

// `flags` and the CPU options, for Args::allow_only of a command that runs the CPU engine.
std::set<std::string> with_cpu_options(std::set<std::string> flags);

// Holds the --threads limit for as long as it lives (no limit without --threads).
class ThreadLimit {
 public:
  explicit ThreadLimit(const Args& args);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  std::unique_ptr<tbb::global_control> control_;
};

// --weights: WeightFormat::kAsStored (default) or kF32.
WeightFormat weight_format_option(const Args& args);

// --kv-dtype and --numerics, each nullopt when absent (the engine's default then). The CPU engine
// refuses an f16 cache under bf16-device numerics itself (engine/cpu/forward.cc).
CpuEngineOptions cpu_engine_options(const Args& args);

}  // namespace kvb
