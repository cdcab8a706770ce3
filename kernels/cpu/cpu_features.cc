#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

namespace kvb::kernels {
namespace {

// F16C through cpuid: clang 14's __builtin_cpu_supports does not know the feature.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

}  // namespace

bool cpu_has_avx2_fma_f16c() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return has;
}

}  // namespace kvb::kernels
