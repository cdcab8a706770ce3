// Matrix products on stored (quantised, f16, bf16, f32) weights against dequantise-then-dot in
// double precision, over random blocks with fixed seeds, for both dot paths (scalar and AVX2).
//
// Two independent truths per row:
//  1. Against the dequantised row dotted with the *quantised* activations (scale · q): the integer
//     path must agree up to float rounding, 1e-5 of Σ|w_i x̃_i| (it computes the same sum).
//  2. Against the dequantised row dotted with the f32 activations: the only approximation is the
//     activation rounding, |x_i - x̃_i| <= scale_b / 2 per element, so the error is bounded by
//     Σ_i |w_i| scale_b(i) / 2 (plus the same float-rounding slack).
#include "kernels/cpu/quantized_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/dequantize.h"

namespace kvb::kernels {
namespace {

struct FormatCase {
  const char* name;
  uint32_t type;
  int block_elements, block_bytes;
  std::vector<int> half_fields;  // byte offsets of a block's fp16 scale/min fields
};

const std::vector<FormatCase>& formats() {
  static const std::vector<FormatCase> all = {
      {"q4_0", 2, 32, 18, {0}},       {"q4_1", 3, 32, 20, {0, 2}},   {"q5_0", 6, 32, 22, {0}},
      {"q5_1", 7, 32, 24, {0, 2}},    {"q8_0", 8, 32, 34, {0}},      {"q4_K", 12, 256, 144, {0, 2}},
      {"q5_K", 13, 256, 176, {0, 2}}, {"q6_K", 14, 256, 210, {208}}, {"f16", 1, 1, 2, {}},
      {"bf16", 30, 1, 2, {}},         {"f32", 0, 1, 4, {}}};
  return all;
}

// Random bytes for the quants; scales and minimums set to fp16 values of either sign in
// [0.002, 0.05) so that no block decodes to inf or NaN. Float types get normal values.
std::vector<uint8_t> random_matrix(const FormatCase& f, int64_t rows, int64_t cols,
                                   std::mt19937& rng) {
  const int64_t blocks = rows * cols / f.block_elements;
  std::vector<uint8_t> bytes(static_cast<size_t>(blocks * f.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> magnitude(0.002f, 0.05f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = bytes.data() + b * f.block_bytes;
    for (int offset : f.half_fields) {
      const float sign = byte(rng) < 128 ? -1.0f : 1.0f;
      const uint16_t h = f32_to_fp16(sign * magnitude(rng));
      blk[offset] = static_cast<uint8_t>(h & 0xFF);
      blk[offset + 1] = static_cast<uint8_t>(h >> 8);
    }
    if (f.type == 1 || f.type == 30) {
      const float v = normal(rng);
      const uint16_t h = f.type == 1 ? f32_to_fp16(v) : f32_to_bf16(v);
      blk[0] = static_cast<uint8_t>(h & 0xFF);
      blk[1] = static_cast<uint8_t>(h >> 8);
    } else if (f.type == 0) {
      const float v = normal(rng);
      std::memcpy(blk, &v, 4);
    }
  }
  return bytes;
}

std::vector<float> random_activations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  for (int64_t i = 0; i < n; i += 97) x[i] *= 8.0f;  // a few outliers, as in real activations
  return x;
}

std::vector<DotPath> available_paths() {
  std::vector<DotPath> paths = {DotPath::kScalar};
  if (dot_path_available(DotPath::kAvx2)) paths.push_back(DotPath::kAvx2);
  return paths;
}

const char* path_name(DotPath p) { return p == DotPath::kAvx2 ? "avx2" : "scalar"; }

class StoredMatmulTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(StoredMatmulTest, RowDotsMatchDequantisedRowsWithinTheActivationRounding) {
  const FormatCase& f = GetParam();
  for (const int64_t cols : {256, 512, 1536}) {
    std::mt19937 rng(1000 + f.type * 7 + static_cast<unsigned>(cols));
    const int64_t rows = 24;
    const std::vector<uint8_t> bytes = random_matrix(f, rows, cols, rng);
    const WeightView w{f.type, bytes.data(), rows, cols};
    std::vector<float> dense(static_cast<size_t>(rows * cols));
    dequantize(f.type, bytes.data(), dense.data(), rows * cols);
    const std::vector<float> x = random_activations(cols, rng);
    const int block = activation_block_for(f.type);
    QuantizedActivations qx;
    std::vector<double> rounded(x.begin(), x.end()), step(cols, 0.0);
    if (block != 0) {
      quantize_activations(x.data(), cols, block, qx);
      for (int64_t i = 0; i < cols; ++i) {
        rounded[i] = double(qx.scales[i / block]) * qx.values[i];
        step[i] = qx.scales[i / block];
      }
    }
    for (DotPath path : available_paths()) {
      SCOPED_TRACE(std::string(f.name) + " " + path_name(path) + " cols " + std::to_string(cols));
      for (int64_t r = 0; r < rows; ++r) {
        double same_inputs = 0, exact = 0, magnitude = 0, rounding_bound = 0;
        for (int64_t i = 0; i < cols; ++i) {
          const double wi = dense[r * cols + i];
          same_inputs += wi * rounded[i];
          exact += wi * x[i];
          magnitude += std::abs(wi * rounded[i]) + std::abs(wi * x[i]);
          rounding_bound += std::abs(wi) * step[i] / 2;
        }
        const double got =
            block != 0 ? stored_row_dot(w, r, qx, path) : stored_row_dot(w, r, x.data(), path);
        const double float_slack = 1e-5 * magnitude;
        EXPECT_NEAR(got, same_inputs, float_slack) << "row " << r;
        EXPECT_NEAR(got, exact, rounding_bound + float_slack) << "row " << r;
      }
    }
  }
}

TEST_P(StoredMatmulTest, MatvecAndTiledMatmulMatchTheRowDots) {
  const FormatCase& f = GetParam();
  std::mt19937 rng(77 + f.type);
  const int64_t rows = 200, cols = 512, n = 5;  // rows not a multiple of the 64-row tiles
  const std::vector<uint8_t> bytes = random_matrix(f, rows, cols, rng);
  const WeightView w{f.type, bytes.data(), rows, cols};
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  dequantize(f.type, bytes.data(), dense.data(), rows * cols);
  const std::vector<float> x = random_activations(n * cols, rng);
  const std::vector<float> bias = random_activations(rows, rng);

  std::vector<float> y(rows);
  matvec(w, x.data(), bias.data(), y.data());
  const int block = activation_block_for(f.type);
  QuantizedActivations qx;
  if (block != 0) quantize_activations(x.data(), cols, block, qx);
  for (int64_t r = 0; r < rows; ++r) {
    const float dot = block != 0 ? stored_row_dot(w, r, qx, best_dot_path())
                                 : stored_row_dot(w, r, x.data(), best_dot_path());
    if (f.type == 0) {  // f32 goes to kernels/cpu/matmul.h's matvec: another summation order
      EXPECT_NEAR(y[r], dot + bias[r], 1e-5f * (1 + std::abs(dot))) << f.name << " row " << r;
    } else {
      EXPECT_FLOAT_EQ(y[r], dot + bias[r]) << f.name << " row " << r;
    }
  }

  // Prefill: f32 activations against the dequantised weights (no activation rounding).
  std::vector<float> out(static_cast<size_t>(n * rows));
  matmul(x.data(), n, w, bias.data(), out.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double expected = bias[r], magnitude = std::abs(bias[r]);
      for (int64_t i = 0; i < cols; ++i) {
        expected += double(dense[r * cols + i]) * x[t * cols + i];
        magnitude += std::abs(double(dense[r * cols + i]) * x[t * cols + i]);
      }
      EXPECT_NEAR(out[t * rows + r], expected, 1e-5 * magnitude) << f.name << " " << t << "," << r;
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, StoredMatmulTest, ::testing::ValuesIn(formats()),
                         [](const auto& info) { return std::string(info.param.name); });

// Q/K/V-style groups of mixed types (32- and 256-blocks, f16, f32) in one call: each output as
// its own matvec gives it.
TEST(StoredMatvecGroup, EachTargetMatchesItsOwnMatvec) {
  std::mt19937 rng(11);
  const int64_t cols = 512;
  const std::vector<float> x = random_activations(cols, rng);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<MatvecTarget> targets;
  std::vector<std::vector<float>> outputs, biases;
  const std::vector<std::pair<int, int64_t>> shapes = {
      {6, 130}, {12, 64}, {8, 1}, {1, 70}, {0, 33}};
  for (const auto& [index, rows] : shapes) {
    const FormatCase* f = nullptr;
    for (const auto& candidate : formats())
      if (static_cast<int>(candidate.type) == index) f = &candidate;
    ASSERT_NE(f, nullptr);
    storage.push_back(random_matrix(*f, rows, cols, rng));
    outputs.emplace_back(rows);
    biases.push_back(random_activations(rows, rng));
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    targets.push_back(
        {{static_cast<uint32_t>(shapes[i].first), storage[i].data(), shapes[i].second, cols},
         i % 2 == 0 ? biases[i].data() : nullptr,
         outputs[i].data()});
  matvec(targets, x.data());
  for (size_t i = 0; i < targets.size(); ++i) {
    std::vector<float> alone(outputs[i].size());
    matvec(targets[i].w, x.data(), targets[i].bias, alone.data());
    EXPECT_EQ(outputs[i], alone) << "target " << i;
  }
  std::vector<MatvecTarget> mismatched = {
      targets[0], {{8, storage[2].data(), 1, 256}, nullptr, outputs[2].data()}};
  EXPECT_THROW(matvec(mismatched, x.data()), std::invalid_argument);
}

TEST(QuantizeActivations, BlocksHoldScaledRoundedValuesAndTheirSums) {
  std::mt19937 rng(5);
  const std::vector<float> x = random_activations(512, rng);
  for (int block : {32, 256}) {
    QuantizedActivations q;
    quantize_activations(x.data(), 512, block, q);
    ASSERT_EQ(q.scales.size(), size_t(512 / block));
    for (int64_t b = 0; b < 512 / block; ++b) {
      float largest = 0;
      for (int i = 0; i < block; ++i) largest = std::max(largest, std::abs(x[b * block + i]));
      EXPECT_FLOAT_EQ(q.scales[b], largest / 127);
    }
    for (int i = 0; i < 512; ++i) {
      EXPECT_LE(std::abs(x[i] - q.scales[i / block] * q.values[i]),
                q.scales[i / block] / 2 * 1.0001f);
      EXPECT_LE(std::abs(int(q.values[i])), 127);
    }
    const int group = block == 32 ? 32 : 16;
    for (size_t g = 0; g < q.sums.size(); ++g) {
      int sum = 0;
      for (int i = 0; i < group; ++i) sum += q.values[g * group + i];
      EXPECT_EQ(q.sums[g], sum);
    }
  }
  QuantizedActivations q;
  EXPECT_THROW(quantize_activations(x.data(), 100, 32, q), std::invalid_argument);
}

// One table of types (kernels/cpu/block_formats.h) behind both: every code dequantize takes, the
// stored matmul takes, with the same block geometry, and no other.
TEST(StoredMatmul, TakesExactlyTheTypesDequantizeTakes) {
  int supported = 0;
  for (uint32_t type = 0; type < 256; ++type) {
    int64_t block_elements = 0, block_bytes = 0;
    const bool dequantized = dequantize_block_geometry(type, &block_elements, &block_bytes);
    EXPECT_EQ(stored_matmul_supported(type), dequantized) << "type " << type;
    if (!dequantized) continue;
    ++supported;
    EXPECT_EQ(stored_row_bytes(type, 4 * block_elements), 4 * block_bytes) << "type " << type;
    EXPECT_EQ(activation_block_for(type), block_elements == 1    ? 0
                                          : block_elements == 32 ? 32
                                                                 : 256)
        << "type " << type;
  }
  EXPECT_EQ(supported, 11);
}

TEST(StoredMatmul, RejectsColumnsThatAreNotWholeBlocks) {
  EXPECT_FALSE(stored_matmul_supported(12, 128));  // q4_K blocks are 256 elements
  EXPECT_TRUE(stored_matmul_supported(12, 512));
  EXPECT_FALSE(stored_matmul_supported(99));
  const std::vector<uint8_t> bytes(144);
  std::vector<float> y(1), x(128);
  EXPECT_THROW(matvec({12, bytes.data(), 1, 128}, x.data(), nullptr, y.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace kvb::kernels
