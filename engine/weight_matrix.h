// One weight matrix of the CPU engine, row-major [out, in] (y = W x), held in the encoding it was
// stored in: f32, or a GGUF block format / f16 / bf16 as the file has it (no dequantised copy).
// The matrix products of kernels/cpu/quantized_matmul.h read it through view(rows, cols).
#pragma once

#include <cstdint>
#include <vector>

namespace kvb::kernels {
struct WeightView;  // kernels/cpu/quantized_matmul.h
}

namespace kvb {

// How a loader keeps weight matrices.
enum class WeightFormat {
  kAsStored,  // the file's encoding where kernels/cpu/quantized_matmul.h computes on it
  kF32,       // everything dequantised to f32 (the reference mode the NumPy tests compare)
};

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // An f32 matrix is its values (implicit, so f32 weights assign as vectors).
  WeightMatrix(std::vector<float> values);  // NOLINT(google-explicit-constructor)
  // `elements` values in ggml type `type`, `bytes` exactly as the file stores them.
  static WeightMatrix encoded(uint32_t type, std::vector<uint8_t> bytes, int64_t elements);

  uint32_t type() const { return type_; }  // ggml type code (0 = f32)
  bool is_f32() const { return type_ == 0; }
  bool empty() const { return elements_ == 0; }
  int64_t size() const { return elements_; }  // elements
  int64_t storage_bytes() const;

  // The values of an f32 matrix; std::logic_error for another encoding.
  const std::vector<float>& f32() const;
  // Every value in f32 (a copy; dequantised when encoded).
  std::vector<float> to_f32() const;
  // Row `row` of a matrix with `cols` columns, in f32.
  void row_to_f32(int64_t row, int64_t cols, float* out) const;
  // The kernels' view as [rows, cols]; std::logic_error when rows * cols is not its size.
  kernels::WeightView view(int64_t rows, int64_t cols) const;

  bool operator==(const WeightMatrix& other) const = default;

 private:
  uint32_t type_ = 0;
  int64_t elements_ = 0;
  std::vector<float> values_;   // f32
  std::vector<uint8_t> bytes_;  // any other encoding
};

}  // namespace kvb
