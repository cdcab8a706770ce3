// What this CPU offers beyond the build's baseline, checked once at run time. The SIMD kernels
// (kernels/cpu/quantized_dot_avx2.cc, kernels/cpu/kv_rows.cc) are compiled by function attribute
// for AVX2/FMA/F16C and called only where this says the CPU has all three.
#pragma once

namespace kvb::kernels {

bool cpu_has_avx2_fma_f16c();

}  // namespace kvb::kernels
