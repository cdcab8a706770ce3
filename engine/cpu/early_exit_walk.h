// ART's decode walk on the CPU engine (docs/methods.md §13) as the engine runs it and as
// `kvbench art-trace` inspects it: the kernel options of a plan's EarlyExitParams, and the kernel's
// trace of a walk without stopping with the stops it implies. The harness reaches the kernels
// through here (kernels/cpu/early_exit_decode.h holds the walk itself).
#pragma once

#include "engine/cache_policy.h"
#include "kernels/cpu/early_exit_decode.h"

namespace kvb {

using kernels::EarlyExitDecodeArgs;
using kernels::EarlyExitOptions;
using kernels::EarlyExitReadings;
using kernels::EarlyExitStop;
using kernels::EarlyExitWalkTrace;

using kernels::early_exit_scale;
using kernels::early_exit_stop;
using kernels::early_exit_walk_trace;

// The options the CPU decode walk runs with under `params`.
EarlyExitOptions early_exit_options(const EarlyExitParams& params);

}  // namespace kvb
