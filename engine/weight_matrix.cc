#include "engine/weight_matrix.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantized_matmul.h"

namespace kvb {

WeightMatrix::WeightMatrix(std::vector<float> values)
    : type_(0), elements_(static_cast<int64_t>(values.size())), values_(std::move(values)) {}

WeightMatrix WeightMatrix::encoded(uint32_t type, std::vector<uint8_t> bytes, int64_t elements) {
  if (type == 0) {
    std::vector<float> values(static_cast<size_t>(elements));
    if (bytes.size() != values.size() * sizeof(float))
      throw std::logic_error("WeightMatrix::encoded: f32 byte count does not match the elements");
    if (elements > 0) std::memcpy(values.data(), bytes.data(), bytes.size());
    return WeightMatrix(std::move(values));
  }
  int64_t block_elements = 0, block_bytes = 0;
  if (!dequantize_block_geometry(type, &block_elements, &block_bytes) ||
      elements % block_elements != 0 ||
      static_cast<int64_t>(bytes.size()) != elements / block_elements * block_bytes)
    throw std::logic_error("WeightMatrix::encoded: " + std::to_string(bytes.size()) +
                           " bytes are not " + std::to_string(elements) + " values of ggml type " +
                           std::to_string(type));
  WeightMatrix m;
  m.type_ = type;
  m.elements_ = elements;
  m.bytes_ = std::move(bytes);
  return m;
}

int64_t WeightMatrix::storage_bytes() const {
  return is_f32() ? elements_ * static_cast<int64_t>(sizeof(float))
                  : static_cast<int64_t>(bytes_.size());
}

const std::vector<float>& WeightMatrix::f32() const {
  if (!is_f32())
    throw std::logic_error("WeightMatrix::f32: the matrix is encoded as ggml type " +
                           std::to_string(type_) + "; use to_f32()");
  return values_;
}

std::vector<float> WeightMatrix::to_f32() const {
  if (is_f32()) return values_;
  std::vector<float> out(static_cast<size_t>(elements_));
  dequantize(type_, bytes_.data(), out.data(), elements_);
  return out;
}

void WeightMatrix::row_to_f32(int64_t row, int64_t cols, float* out) const {
  if (cols <= 0 || (row + 1) * cols > elements_)
    throw std::logic_error("WeightMatrix::row_to_f32: row " + std::to_string(row) +
                           " is outside the matrix");
  if (is_f32()) {
    std::copy_n(values_.begin() + row * cols, cols, out);
    return;
  }
  const int64_t row_bytes = kernels::stored_row_bytes(type_, cols);
  dequantize_serial(type_, bytes_.data() + row * row_bytes, out, cols);
}

kernels::WeightView WeightMatrix::view(int64_t rows, int64_t cols) const {
  if (rows * cols != elements_)
    throw std::logic_error("WeightMatrix::view: [" + std::to_string(rows) + ", " +
                           std::to_string(cols) + "] does not match its " +
                           std::to_string(elements_) + " elements");
  const auto* data = is_f32() ? reinterpret_cast<const uint8_t*>(values_.data()) : bytes_.data();
  return {type_, data, rows, cols};
}

}  // namespace kvb
