// What a run records about its machine (harness/sweep/run_info.h).
#include "harness/sweep/run_info.h"

#include <gtest/gtest.h>

namespace kvb {
namespace {

// The GPU sweeps of 2026-12-05 recorded "none (CPU build)" from a CUDA build on an H100: the check
// read a macro no target defines. A CUDA build names the device or says "none", never that it is
// a CPU build.
TEST(RunInfo, GpuDescriptionFollowsTheBuild) {
  const std::string gpu = gpu_description();
#ifdef KVB_HAVE_CUDA
  EXPECT_NE(gpu, "none (CPU build)");
  EXPECT_FALSE(gpu.empty());
#else
  EXPECT_EQ(gpu, "none (CPU build)");
#endif
}

}  // namespace
}  // namespace kvb
