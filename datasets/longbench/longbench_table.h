// The data table behind longbench.h (kept apart: it is long and generated from the config files).
#pragma once

#include "datasets/longbench/longbench.h"

namespace kvb {

inline constexpr int kLongBenchDatasetCount = 21;
extern const LongBenchDataset kLongBenchDatasets[kLongBenchDatasetCount];

}  // namespace kvb
