// `kvbench bench` flags, shared by both devices, and its GPU half: chosen with --device cuda, or by
// default for --preset when a GPU is present. Prints TTFT, TPOT, KV bytes and peak memory with
// ratios to the measured bounds (harness/bench/bench_cuda.h measures).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "harness/commands/args.h"

namespace kvb {

// Every flag `kvbench bench` takes, on either device; a flag one device cannot honour is refused
// there by name.
const std::set<std::string>& bench_flags();
// --context / --batch: positive integers separated by commas, or `fallback` when absent.
std::vector<int> positive_int_list(const Args& args, const std::string& key,
                                   std::vector<int> fallback);

bool gpu_bench_requested(const Args& args);
int run_gpu_bench(const Args& args);

}  // namespace kvb
