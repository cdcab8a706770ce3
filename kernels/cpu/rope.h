// Rotary position embedding. Frequencies inv_freq[i] = theta^(-2i/d), optionally rescaled by
// Llama-3.x's "llama3" rule (long wavelengths divided by `factor`, a smooth ramp between the low-
// and high-frequency cut-offs; transformers' _compute_llama3_parameters defines the rule).
//
// Two pairings of the head dimensions exist and a weight file fixes which one its Q/K rows use:
//   kInterleavedPairs: rotate (x[2i], x[2i+1])      — llama.cpp "norm" RoPE (GGUF Llama rows)
//   kHalves:           rotate (x[i], x[i + d/2])    — HF rotate_half / llama.cpp "neox" (Qwen2)
#pragma once

#include <cstdint>
#include <vector>

namespace kvb::kernels {

enum class RopePairing { kInterleavedPairs, kHalves };

struct Llama3FrequencyScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

// d/2 inverse frequencies.
std::vector<float> rope_inverse_frequencies(int head_dim, float theta);
std::vector<float> rope_inverse_frequencies_llama3(int head_dim, float theta,
                                                   const Llama3FrequencyScaling& scaling);

// How the angle position * inv_freq[i] is formed: in double (the reference: f32 loses ~1e-2 rad
// at 1e5 rad), or as the f32 product that kernels/cuda/rope.cuh's apply_rope_row takes the sine
// and cosine of (the CPU engine's device numerics, engine/cpu/device_numerics.h).
enum class RopeAngles { kDouble, kF32Product };

// Rotates each of the n_heads vectors of x ([n_heads, head_dim], contiguous with `head_stride`
// floats between heads) by the angle position * inv_freq[i].
void apply_rope(float* x, int n_heads, int head_dim, int64_t head_stride, int64_t position,
                const float* inv_freq, RopePairing pairing,
                RopeAngles angles = RopeAngles::kDouble);

}  // namespace kvb::kernels
