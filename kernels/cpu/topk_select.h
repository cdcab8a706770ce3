// Per-list top-k: the indices of the k largest keys, ties to the lower index, returned in
// increasing index order. The CPU twin of kernels/cuda/topk_select.h (the decode selectors' shared
// top-k: TOPK's logits, Quest's pages, BinaryPC's tokens and its EAS set); the device writes the
// same indices into decode_attention's index-list format.
//
// O(n) selection (nth_element), then a sort of the k chosen: this runs at every decode step of
// every head.
#pragma once

#include <cstdint>
#include <vector>

namespace kvb::kernels {

// k is clamped to [0, n]. f32 scores: +0 and -0 tie; no NaN.
std::vector<int32_t> topk_select(const float* scores, int n, int k);
// 16-bit keys, larger is better (BinaryPC's score + 32768).
std::vector<int32_t> topk_select(const uint16_t* keys, int n, int k);

}  // namespace kvb::kernels
