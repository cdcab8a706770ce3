// The CPU engine's "device numerics" (ForwardPrecision::kBf16Device): the f32 forward pass with the
// CUDA engine's roundings to bf16, so that a comparison of the two engines (kept sets, logits)
// measures the code that differs, not the precision. Accumulation stays f32 (in another order), so
// the two agree to the odd last-bit flip of a bf16 rounding, not bit for bit.
//
// Where the CUDA prefill rounds (the path of a chunk of more than 4 rows: run_layers in
// engine/cuda/cuda_engine_impl.h without folded norms), and what the CPU engine does there:
// - weights: every matrix, norm gain and bias goes up as bf16(to_f32(w)), round to nearest even
//   (engine/cuda/cuda_engine.cu: upload_bf16, to_bf16_bits; engine/cuda/device_weights.cc takes
//   the same values through WeightSource::read_rows_bf16). Here weights_rounded_to_bf16: a copy of
//   the model holding the bf16 values.
// - embeddings: bf16 rows widened into the f32 residual stream (kernels/cuda/transformer_ops.cu,
//   embedding_kernel). The residual stays f32; each delta added to it is the bf16 output of the o
//   or down product (kernels/cuda/rmsnorm.cu, add_rmsnorm_rows_kernel: value + bf16 delta).
// - RMSNorm output: bf16(x · rsqrt(mean(x²) + eps) · gain) (rmsnorm.cu, __floats2bfloat162_rn).
// - every product (qkv, o, gate/up, down): bf16 inputs and weights, f32 accumulation, bf16 output
//   (kernels/cuda/decode_gemv.cu, matmul: cublasGemmEx to CUDA_R_16BF, CUBLAS_COMPUTE_32F); the
//   LM head's output stays f32 (matmul_f32out).
// - QKV bias: bf16(bf16(x) + bias), then RoPE on the bf16 values with the angle as the f32 product
//   position · inv_freq, each rotated value rounded to bf16 (kernels/cuda/rope.cuh: with_bias,
//   apply_rope_row, rotate_pair). V is not rotated; K and V go to the bf16 cache as they are
//   (transformer_ops.cu, append_kv_row), and Q is read by the attention in bf16.
// - attention (kernels/cuda/prefill_attention.cu, and prefill_attention_sm90a.cu for head_dim 128
//   on sm_90): f32 logits from bf16 Q and K, an online softmax over key tiles (64 keys; 128 in the
//   sm_90 kernel) whose unnormalised probabilities 2^(s - running max) are rounded to bf16 for P·V
//   (kernels/cuda/online_softmax.cuh, probability_fragment; sm90a: OnlineSoftmax::step, pack_bf16)
//   while the row sum adds them unrounded; the output row is bf16(O / sum). Here the CPU attention
//   rounds p relative to the running maximum of its tile (kernels/cpu/attention.h,
//   bf16_probability_tile) and the engine rounds the output.
// - SwiGLU: gate and up are the bf16 product's halves; bf16(silu(g) · u) (kernels/cuda/
//   activations.cu, swiglu_kernel).
// - the final norm: bf16 as above; logits f32 (cuda_engine.cu, logits_for_rows).
// Not reproduced: exp2 on ex2.approx and rsqrtf (a few f32 ulps), and the decode step's own
// numerics. For at most 4 rows (each decode step, and a prefill chunk that short) the CUDA engine
// folds each RMSNorm into the products around it (kernels/cuda/transformer_ops.h, FoldedNorm:
// bf16(x · gain) is rounded before the 1/rms scale) and its decode attention splits the keys into
// chunks merged afterwards; the CPU decode step applies the prefill's rounding points above, with
// exact probabilities.
// A rounding that the two summation orders put on different sides is carried by every later
// layer; CpuEngine::force_layer_inputs (engine/cpu/forward.h) starts each layer from the device's
// input to it, so that a comparison sees one layer's arithmetic at a time.
#pragma once

#include <optional>
#include <string>

#include "engine/weights.h"

namespace kvb {

enum class ForwardPrecision {
  kF32,         // f32 activations, weights as stored (the reference)
  kBf16Device,  // the CUDA engine's roundings, above
};

std::string forward_precision_name(ForwardPrecision precision);  // "f32", "bf16-device"
std::optional<ForwardPrecision> parse_forward_precision(const std::string& name);

// A copy of `weights` with every value rounded to bf16 (nearest even) as the CUDA engine uploads
// it: f32 matrices, norms and biases as f32 holding bf16 values, other matrices stored as bf16.
ModelWeights weights_rounded_to_bf16(const ModelWeights& weights);

// The key tile of the CUDA prefill attention for heads of `head_dim` (the tile the probabilities
// are rounded relative to): 128 for the sm_90 kernel of head_dim 128, 64 otherwise. A head_dim 128
// model compared against another GPU than sm_90 has 64-key tiles there.
int device_attention_key_tile(int head_dim);

}  // namespace kvb
