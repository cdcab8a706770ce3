#include "kernels/cpu/rope.h"

#include <cmath>

namespace kvb::kernels {

std::vector<float> rope_inverse_frequencies(int head_dim, float theta) {
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i)
    inv_freq[i] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), 2.0 * i / head_dim));
  return inv_freq;
}

std::vector<float> rope_inverse_frequencies_llama3(int head_dim, float theta,
                                                   const Llama3FrequencyScaling& s) {
  std::vector<float> inv_freq = rope_inverse_frequencies(head_dim, theta);
  const double pi = 3.14159265358979323846;
  const double low_freq_wavelength = s.original_max_position / s.low_freq_factor;
  const double high_freq_wavelength = s.original_max_position / s.high_freq_factor;
  for (float& f : inv_freq) {
    const double wavelength = 2.0 * pi / f;
    if (wavelength < high_freq_wavelength) continue;  // high frequencies unchanged
    if (wavelength > low_freq_wavelength) {
      f = static_cast<float>(f / s.factor);
      continue;
    }
    const double smooth = (s.original_max_position / wavelength - s.low_freq_factor) /
                          (s.high_freq_factor - s.low_freq_factor);
    f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
  }
  return inv_freq;
}

void apply_rope(float* x, int n_heads, int head_dim, int64_t head_stride, int64_t position,
                const float* inv_freq, RopePairing pairing, RopeAngles angles) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = angles == RopeAngles::kDouble
                             ? static_cast<double>(position) * inv_freq[i]
                             : static_cast<double>(static_cast<float>(position) * inv_freq[i]);
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(std::sin(angle));
    const int a = pairing == RopePairing::kInterleavedPairs ? 2 * i : i;
    const int b = pairing == RopePairing::kInterleavedPairs ? 2 * i + 1 : i + half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + h * head_stride;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace kvb::kernels
