// The GPU half of `kvbench bench`: chosen with --device cuda, or by default for --preset when a GPU
// is present. Prints TTFT, TPOT, KV bytes and peak memory with ratios to the measured bounds.
#pragma once

#include "harness/args.h"

namespace kvb {

bool gpu_bench_requested(const Args& args);
int run_gpu_bench(const Args& args);

}  // namespace kvb
