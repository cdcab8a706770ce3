// The online-softmax update of one key tile (FlashAttention-2's running max, rescale and sum),
// shared by the mma.sync attention kernels: the causal prefill (prefill_attention.cu), the
// dense decode (decode_attention.cu) and the ART walk (early_exit_decode.cu). The Hopper prefill
// (prefill_attention_sm90a.cu) keeps its own: wgmma's accumulator layout, the scale folded
// into the exponent's FMA and ex2.approx.ftz.
//
// A thread holds two rows of the m16n8 accumulator tiles (mma_tiles.cuh): s[nt][e] is row e >> 1
// (g or g + 8) at key column nt * 8 + 2t + (e & 1); the row's other columns sit in its quad (lanes
// 4g .. 4g + 3). Logits are in log2 units (the scale times log2 e folded in) and -inf where masked;
// a row with no visible key so far keeps max -inf, sum 0, and its probabilities are 0.
#pragma once

#include "kernels/cuda/mma_tiles.cuh"

namespace kvb::cuda {

// How a tile's probabilities join the running sum. The two orders round differently, so each
// kernel keeps the one its results were checked with: kEach adds every p to the running sum in
// column order (prefill, dense decode); kTileFirst sums the tile's p first and adds that sum (the
// ART walk, which also reports each block's own mass).
enum class TileSum { kEach, kTileFirst };

struct SoftmaxTileStep {
  float correction[2];  // the factor of each accumulator row (rescale_rows) before this tile's P V
  float tile_sum[2];    // the tile's own Σp over this thread's columns
};

// Logits s become probabilities 2^(s - max) in place; row_max moves to the new maxima (over the
// quad) and row_sum (this thread's columns) is rescaled and grows by the tile's p.
template <TileSum kOrder, int kKeyTiles>
__device__ __forceinline__ SoftmaxTileStep online_softmax_tile(float (&s)[kKeyTiles][4],
                                                               float (&row_max)[2],
                                                               float (&row_sum)[2]) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[nt][e]);
  SoftmaxTileStep step;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = quad_max(tile_max[r]);
    const float new_max = fmaxf(row_max[r], tile_max[r]);
    step.correction[r] = new_max == -INFINITY ? 1.f : exp2f(row_max[r] - new_max);
    row_max[r] = new_max;
    row_sum[r] *= step.correction[r];
    step.tile_sum[r] = 0.f;
  }
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const float p = row_max[r] == -INFINITY ? 0.f : exp2f(s[nt][e] - row_max[r]);
      s[nt][e] = p;
      step.tile_sum[r] += p;
      if constexpr (kOrder == TileSum::kEach) row_sum[r] += p;
    }
  if constexpr (kOrder == TileSum::kTileFirst) {
    row_sum[0] += step.tile_sum[0];
    row_sum[1] += step.tile_sum[1];
  }
  return step;
}

// Accumulator tiles (m16n8 C fragments: logits or outputs) at zero.
template <int kTiles>
__device__ __forceinline__ void zero_tiles(float (&tiles)[kTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) tiles[i][0] = tiles[i][1] = tiles[i][2] = tiles[i][3] = 0.f;
}

// Rows g and g + 8 before their first key: no maximum yet, nothing summed.
__device__ __forceinline__ void start_rows(float (&row_max)[2], float (&row_sum)[2]) {
  row_max[0] = row_max[1] = -INFINITY;
  row_sum[0] = row_sum[1] = 0.f;
}

// Rows g and g + 8 of the output accumulators (o[dt][e], row e >> 1) times their corrections.
template <int kDimTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[kDimTiles][4],
                                             const float (&correction)[2]) {
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] *= correction[e >> 1];
}

// The tile's probabilities as the A fragment of the P V product over keys 16 kk .. 16 kk + 15.
template <int kKeyTiles>
__device__ __forceinline__ void probability_fragment(const float (&p)[kKeyTiles][4], int kk,
                                                     uint32_t (&frag)[4]) {
  frag[0] = pack_bf16(p[2 * kk][0], p[2 * kk][1]);
  frag[1] = pack_bf16(p[2 * kk][2], p[2 * kk][3]);
  frag[2] = pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
  frag[3] = pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
}

}  // namespace kvb::cuda
