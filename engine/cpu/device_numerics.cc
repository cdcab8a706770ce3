#include "engine/cpu/device_numerics.h"

#include <cstring>

#include "engine/gguf.h"
#include "kernels/cpu/dequantize.h"

namespace kvb {
namespace {

std::vector<float> rounded(std::vector<float> values) {
  round_to_bf16(values.data(), static_cast<int64_t>(values.size()));
  return values;
}

// An f32 matrix stays f32 holding bf16 values (the prefill's sgemm reads it as it is, where bf16
// rows would be widened tile by tile); any other encoding becomes bf16, no larger than it was.
WeightMatrix matrix_in_bf16(const WeightMatrix& matrix) {
  if (matrix.empty()) return matrix;
  if (matrix.is_f32()) return rounded(matrix.f32());
  const std::vector<float> values = matrix.to_f32();
  std::vector<uint8_t> bytes(values.size() * sizeof(uint16_t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = f32_to_bf16(values[i]);
    std::memcpy(&bytes[i * sizeof(uint16_t)], &bits, sizeof(uint16_t));
  }
  return WeightMatrix::encoded(static_cast<uint32_t>(GgmlType::kBF16), std::move(bytes),
                               matrix.size());
}

}  // namespace

std::string forward_precision_name(ForwardPrecision precision) {
  return precision == ForwardPrecision::kF32 ? "f32" : "bf16-device";
}

std::optional<ForwardPrecision> parse_forward_precision(const std::string& name) {
  if (name == "f32") return ForwardPrecision::kF32;
  if (name == "bf16-device") return ForwardPrecision::kBf16Device;
  return std::nullopt;
}

ModelWeights weights_rounded_to_bf16(const ModelWeights& weights) {
  ModelWeights out;
  out.config = weights.config;
  out.source = weights.source;
  out.weight_dtypes = weights.weight_dtypes + " (rounded to bf16)";
  out.token_embedding = matrix_in_bf16(weights.token_embedding);
  out.output_norm = rounded(weights.output_norm);
  out.output = matrix_in_bf16(weights.output);
  for (const LayerWeights& layer : weights.layers) {
    LayerWeights l;
    l.attn_norm = rounded(layer.attn_norm);
    l.wq = matrix_in_bf16(layer.wq);
    l.wk = matrix_in_bf16(layer.wk);
    l.wv = matrix_in_bf16(layer.wv);
    l.bq = rounded(layer.bq);
    l.bk = rounded(layer.bk);
    l.bv = rounded(layer.bv);
    l.wo = matrix_in_bf16(layer.wo);
    l.ffn_norm = rounded(layer.ffn_norm);
    l.w_gate = matrix_in_bf16(layer.w_gate);
    l.w_up = matrix_in_bf16(layer.w_up);
    l.w_down = matrix_in_bf16(layer.w_down);
    out.layers.push_back(std::move(l));
  }
  return out;
}

int device_attention_key_tile(int head_dim) { return head_dim == 128 ? 128 : 64; }

}  // namespace kvb
