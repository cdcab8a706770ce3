#include "kernels/cpu/quantized_matmul.h"

#include <cblas.h>
#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/block_formats.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"

namespace kvb::kernels {
namespace {

constexpr uint32_t kF32 = 0;

const BlockFormat& checked_format(const WeightView& w) {
  const BlockFormat* f = block_format(w.type);
  if (f == nullptr || !stored_matmul_supported(w.type, w.cols))
    throw std::invalid_argument("stored matmul: ggml type " + std::to_string(w.type) + " with " +
                                std::to_string(w.cols) + " columns is not supported");
  return *f;
}

bool cpu_has_avx2() { return cpu_has_avx2_fma_f16c(); }

const uint8_t* row_start(const WeightView& w, int64_t row) {
  return w.data + row * stored_row_bytes(w.type, w.cols);
}

row_dot::Activations activation_view(const QuantizedActivations& x) {
  return {x.scales.data(), x.sums.data(), x.values.data()};
}

// Rows of 64 per task: enough work to amortise the task, small enough to balance 2-128 cores.
constexpr int64_t kRowGrain = 64;

}  // namespace

bool stored_matmul_supported(uint32_t type) { return block_format(type) != nullptr; }

bool stored_matmul_supported(uint32_t type, int64_t cols) {
  const BlockFormat* f = block_format(type);
  return f != nullptr && cols > 0 && cols % f->block_elements == 0;
}

int64_t stored_row_bytes(uint32_t type, int64_t cols) {
  const BlockFormat* f = block_format(type);
  if (f == nullptr)
    throw std::invalid_argument("stored_row_bytes: unsupported ggml type " + std::to_string(type));
  return cols / f->block_elements * f->block_bytes;
}

int activation_block_for(uint32_t type) {
  const BlockFormat* f = block_format(type);
  return f == nullptr ? 0 : f->activation_block;
}

void quantize_activations(const float* x, int64_t n, int block, QuantizedActivations& out) {
  if ((block != 32 && block != 256) || n % block != 0)
    throw std::invalid_argument("quantize_activations: " + std::to_string(n) +
                                " values in blocks of " + std::to_string(block));
  out.block = block;
  out.sum_group = block == 32 ? 32 : 16;
  out.n = n;
  out.scales.resize(n / block);
  out.sums.assign(n / out.sum_group, 0);
  out.values.resize(n);
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    float largest = 0;
    for (int i = 0; i < block; ++i) largest = std::max(largest, std::fabs(xb[i]));
    const float scale = largest / 127.0f;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    out.scales[b] = scale;
    for (int i = 0; i < block; ++i) {
      const int q = static_cast<int>(std::nearbyint(xb[i] * inverse));
      const int8_t clamped = static_cast<int8_t>(std::clamp(q, -127, 127));
      out.values[b * block + i] = clamped;
      out.sums[(b * block + i) / out.sum_group] += clamped;
    }
  }
}

DotPath best_dot_path() { return cpu_has_avx2() ? DotPath::kAvx2 : DotPath::kScalar; }

bool dot_path_available(DotPath path) { return path == DotPath::kScalar || cpu_has_avx2(); }

float stored_row_dot(const WeightView& w, int64_t row, const QuantizedActivations& x,
                     DotPath path) {
  const BlockFormat& f = checked_format(w);
  if (f.activation_block == 0 || x.block != f.activation_block || x.n != w.cols)
    throw std::invalid_argument("stored_row_dot: activations do not match the weight format");
  const auto fn = path == DotPath::kAvx2 && cpu_has_avx2() ? f.avx2 : f.scalar;
  return fn(row_start(w, row), activation_view(x), w.cols / f.activation_block);
}

float stored_row_dot(const WeightView& w, int64_t row, const float* x, DotPath path) {
  const BlockFormat& f = checked_format(w);
  if (f.activation_block != 0)
    throw std::invalid_argument("stored_row_dot: quantised rows take quantised activations");
  const auto fn = path == DotPath::kAvx2 && cpu_has_avx2() ? f.float_avx2 : f.float_scalar;
  return fn(row_start(w, row), x, w.cols);
}

void matvec(const WeightView& w, const float* x, const float* bias, float* y) {
  const BlockFormat& f = checked_format(w);
  if (w.type == kF32) {  // the f32 reference's own product (kernels/cpu/matmul.h)
    matvec(reinterpret_cast<const float*>(w.data), w.rows, w.cols, x, bias, y);
    return;
  }
  const bool avx2 = cpu_has_avx2();
  const int64_t row_bytes = stored_row_bytes(w.type, w.cols);
  auto for_rows = [&](auto row_dot) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, w.rows, kRowGrain),
                      [&](const tbb::blocked_range<int64_t>& rows) {
                        for (int64_t r = rows.begin(); r < rows.end(); ++r) {
                          const float value = row_dot(w.data + r * row_bytes);
                          y[r] = bias != nullptr ? value + bias[r] : value;
                        }
                      });
  };
  if (f.activation_block == 0) {
    const auto fn = avx2 ? f.float_avx2 : f.float_scalar;
    for_rows([&](const uint8_t* row) { return fn(row, x, w.cols); });
    return;
  }
  // One quantisation of x per call, read by every row. Not thread_local: a thread waiting in
  // parallel_for may run another matvec's task.
  QuantizedActivations activations;
  quantize_activations(x, w.cols, f.activation_block, activations);
  const row_dot::Activations view = activation_view(activations);
  const auto fn = avx2 ? f.avx2 : f.scalar;
  const int64_t blocks = w.cols / f.activation_block;
  for_rows([&](const uint8_t* row) { return fn(row, view, blocks); });
}

void matvec(std::span<const MatvecTarget> targets, const float* x) {
  // f32 matrices keep the reference's own product; the rest share one loop over all their rows.
  std::vector<MatvecTarget> stored;
  for (const MatvecTarget& t : targets) {
    if (t.w.type == kF32) {
      matvec(t.w, x, t.bias, t.y);
    } else {
      checked_format(t.w);
      stored.push_back(t);
    }
  }
  if (stored.empty()) return;
  const int64_t cols = stored.front().w.cols;
  QuantizedActivations by_32, by_256;  // each made only when a matrix reads it
  std::vector<int64_t> first_row = {0};
  for (const MatvecTarget& t : stored) {
    if (t.w.cols != cols)
      throw std::invalid_argument("matvec: the matrices of one input differ in columns");
    const int block = activation_block_for(t.w.type);
    QuantizedActivations& q = block == 256 ? by_256 : by_32;
    if (block != 0 && q.n == 0) quantize_activations(x, cols, block, q);
    first_row.push_back(first_row.back() + t.w.rows);
  }
  const bool avx2 = cpu_has_avx2();
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, first_row.back(), kRowGrain),
      [&](const tbb::blocked_range<int64_t>& rows) {
        size_t m = std::upper_bound(first_row.begin(), first_row.end(), rows.begin()) -
                   first_row.begin() - 1;
        for (int64_t global = rows.begin(); global < rows.end(); ++global) {
          while (global >= first_row[m + 1]) ++m;
          const MatvecTarget& t = stored[m];
          const BlockFormat& f = *block_format(t.w.type);
          const int64_t r = global - first_row[m];
          const uint8_t* row = row_start(t.w, r);
          float value;
          if (f.activation_block == 0) {
            value = (avx2 ? f.float_avx2 : f.float_scalar)(row, x, cols);
          } else {
            const QuantizedActivations& q = f.activation_block == 256 ? by_256 : by_32;
            value = (avx2 ? f.avx2 : f.scalar)(row, activation_view(q), cols / f.activation_block);
          }
          t.y[r] = t.bias != nullptr ? value + t.bias[r] : value;
        }
      });
}

void matmul(const float* x, int64_t n, const WeightView& w, const float* bias, float* y) {
  checked_format(w);
  if (w.type == kF32) {
    matmul(x, n, w.cols, reinterpret_cast<const float*>(w.data), w.rows, bias, y);
    return;
  }
  // Tiles of 64 rows: a tile's f32 copy (64 · cols floats) stays in cache while sgemm reads it.
  constexpr int64_t kTileRows = 64;
  const int64_t row_bytes = stored_row_bytes(w.type, w.cols);
  tbb::enumerable_thread_specific<std::vector<float>> tiles;
  SingleThreadedBlas single_threaded;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, w.rows, kTileRows),
      [&](const tbb::blocked_range<int64_t>& rows) {
        const int64_t first = rows.begin(), count = rows.end() - rows.begin();
        std::vector<float>& tile = tiles.local();
        tile.resize(static_cast<size_t>(count * w.cols));
        dequantize_serial(w.type, w.data + first * row_bytes, tile.data(), count * w.cols);
        float beta = 0.0f;
        if (bias != nullptr) {
          for (int64_t r = 0; r < n; ++r) std::copy_n(bias + first, count, y + r * w.rows + first);
          beta = 1.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                    static_cast<int>(count), static_cast<int>(w.cols), 1.0f, x,
                    static_cast<int>(w.cols), tile.data(), static_cast<int>(w.cols), beta,
                    y + first, static_cast<int>(w.rows));
      },
      tbb::simple_partitioner());
}

}  // namespace kvb::kernels
