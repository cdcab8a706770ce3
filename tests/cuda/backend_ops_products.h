// The backend-ops rows of the bf16 products with bf16 output and the decode step's fused products
// (kernels/cuda/transformer_ops.h; the table: tests/cuda/backend_ops_test.cc): matmul,
// gate_up_swiglu, lm_head_argmax, and the folded norms (fold_rmsnorm, the products after a folded
// norm, matmul_into_residual), each against its CPU twin of the same name (kernels/cpu/matmul.h,
// kernels/cpu/transformer_ops.h), which stays in f32.
//
// Tolerances, from what the device's arithmetic explains:
// - a product's f32 sums in another order: product_bound (check_matmul's 1e-3 at in 576 with x of
//   scale 1 and w of 0.1, growing with sqrt(in)) and 1e-5 relative for long sums of one sign (a
//   planted logit); a bf16 output adds one rounding of a value that close, at most a whole step
//   |want|/128;
// - SwiGLU of bf16 gate and up values: each off by a step plus the sums' bound, through silu
//   (slope at most 1.1) and the product, then the output's own step (swiglu_tolerance);
// - after a folded norm the device rounds the rows v·gain to bf16 before the norm's scale, 2^-9
//   relative per term of the sum, random in sign: folded_bound, 1e-2 at in 576 (about ten standard
//   deviations for rows of scale 1.7 and w of 0.1), growing with sqrt(in);
// - the folded state itself: the scaled rows bit-equal (v·gain rounded once on both sides), Σv²
//   1e-5 relative (f32 block sums on the device, f64 on the CPU);
// - argmax indices exact, on rows planted so that one logit leads by many standard deviations.
#pragma once

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/transformer_ops.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/backend_ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

// A cuBLAS handle for one check.
class CublasHandle {
 public:
  CublasHandle() { cublasCreate(&handle_); }
  ~CublasHandle() { cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

inline double product_bound(int in) { return 1e-3 * std::sqrt(in / 576.0); }
inline double folded_bound(int in) { return 1e-2 * std::sqrt(in / 576.0); }

// |device - twin| for silu(gate) * up from bf16 gate g and up u, each within a step and `bound`.
inline double swiglu_tolerance(float g, float u, float want, double bound) {
  const double dg = std::abs(g) / 128 + bound, du = std::abs(u) / 128 + bound;
  const double silu = g / (1 + std::exp(-double(g)));
  return 1.1 * dg * (std::abs(u) + du) + std::abs(silu) * du + std::abs(want) / 128;
}

inline void expect_swiglu_near(const std::vector<float>& got, const std::vector<float>& want,
                               const std::vector<float>& gate_up, int ffn, double bound) {
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t row = i / ffn, j = i % ffn;
    const float g = gate_up[row * 2 * ffn + j], u = gate_up[row * 2 * ffn + ffn + j];
    ASSERT_NEAR(got[i], want[i], swiglu_tolerance(g, u, want[i], bound)) << "element " << i;
  }
}

// |got - want| <= relative |want| + bound: relative 1/128 for a bf16 output (a whole step), 1e-5
// for an f32 one (long f32 sums of one sign).
constexpr double kBf16Output = 1.0 / 128, kF32Output = 1e-5;
inline void expect_product_near(const std::vector<float>& got, const std::vector<float>& want,
                                double relative, double bound) {
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], relative * std::abs(want[i]) + bound) << "entry " << i;
}

// matmul with bf16 output (the GEMV for n <= 4 and in % 8 == 0, cuBLAS otherwise).
inline void check_matmul_bf16(int n, int in, int out) {
  const auto x = random_bf16_values(size_t(n) * in, 71);
  const auto w = random_bf16_values(size_t(out) * in, 72, 0.1f);
  std::vector<float> expected(size_t(n) * out);
  kernels::matmul(x.data(), n, in, w.data(), out, nullptr, expected.data());
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w);
  cuda::DeviceBuffer d_y(expected.size() * 2, "y");
  const CublasHandle cublas;
  cuda::matmul(cublas.get(), d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
               d_y.as<__nv_bfloat16>(), n, in, out, nullptr);
  cuda::check(cudaDeviceSynchronize(), "matmul");
  expect_product_near(from_device_bf16(d_y, expected.size()), expected, kBf16Output,
                      product_bound(in));
}

inline void check_gate_up_swiglu(int n, int in, int ffn) {
  const auto x = random_bf16_values(size_t(n) * in, 73);
  const auto w = random_bf16_values(size_t(2) * ffn * in, 74, 0.1f);
  std::vector<float> gate_up(size_t(n) * 2 * ffn), expected(size_t(n) * ffn);
  kernels::gate_up_swiglu(x.data(), w.data(), gate_up.data(), expected.data(), n, in, ffn);
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w);
  cuda::DeviceBuffer d_gate_up(gate_up.size() * 2, "gate_up"), d_out(expected.size() * 2, "out");
  const CublasHandle cublas;
  cuda::gate_up_swiglu(cublas.get(), d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
                       d_gate_up.as<__nv_bfloat16>(), d_out.as<__nv_bfloat16>(), n, in, ffn,
                       nullptr);
  cuda::check(cudaDeviceSynchronize(), "gate_up_swiglu");
  expect_swiglu_near(from_device_bf16(d_out, expected.size()), expected, gate_up, ffn,
                     product_bound(in));
}

// Row r's planted maximum: a weight row away from the others' (the last one for row 0).
inline int planted_row(int r, int vocab) { return int((int64_t(r) * 7919 + vocab - 1) % vocab); }

// x_r = 10 w[t_r] (bf16): logit t_r is 10 |w_t|² ≈ in / 30 for w of scale 0.1, the others of
// standard deviation sqrt(in) / 30, so the argmax is t_r on both twins. Two calls: the GEMV's
// argmax words must be left zero for the next.
inline void check_lm_head_argmax(int n, int in, int vocab) {
  const auto w = random_bf16_values(size_t(vocab) * in, 75, 0.1f);
  std::vector<float> x(size_t(n) * in);
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < in; ++j)
      x[size_t(r) * in + j] = round_bf16(10 * w[size_t(planted_row(r, vocab)) * in + j]);
  std::vector<float> logits(size_t(n) * vocab);
  std::vector<int32_t> next(n);
  kernels::lm_head_argmax(x.data(), w.data(), logits.data(), n, in, vocab, next.data());
  for (int r = 0; r < n; ++r) ASSERT_EQ(next[r], planted_row(r, vocab)) << "row " << r;
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w);
  auto d_best = to_device(std::vector<unsigned long long>(n, 0));
  cuda::DeviceBuffer d_logits(logits.size() * 4, "logits"), d_next(size_t(n) * 4, "next");
  const CublasHandle cublas;
  for (int call = 0; call < 2; ++call) {
    cuda::lm_head_argmax(cublas.get(), d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
                         d_logits.as<float>(), n, in, vocab, d_best.as<unsigned long long>(),
                         d_next.as<int32_t>(), nullptr);
    cuda::check(cudaDeviceSynchronize(), "lm_head_argmax");
    expect_product_near(from_device<float>(d_logits, logits.size()), logits, kF32Output,
                        product_bound(in));
    EXPECT_EQ(from_device<int32_t>(d_next, n), next) << "call " << call;
  }
  EXPECT_EQ(from_device<unsigned long long>(d_best, n), std::vector<unsigned long long>(n, 0));
}

// Row sums of one sum slot, its lines added in order (as the consumer adds them), and the words of
// its other lines, for rows < n.
inline std::vector<double> folded_slot_sums(const cuda::DeviceBuffer& sums, int slot, int n) {
  const auto words = from_device<double>(sums, cuda::kFoldedNormSumsDoubles);
  std::vector<double> total(n, 0.0);
  for (int line = 0; line < cuda::kFoldedNormLines; ++line)
    for (int r = 0; r < n; ++r)
      total[r] += words[slot * cuda::kFoldedNormSlotDoubles + cuda::folded_norm_word(line, r)];
  return total;
}
inline bool folded_slot_zero(const cuda::DeviceBuffer& sums, int slot, int n) {
  const auto words = from_device<double>(sums, cuda::kFoldedNormSumsDoubles);
  for (int line = 0; line < cuda::kFoldedNormLines; ++line)
    for (int r = 0; r < n; ++r)
      if (words[slot * cuda::kFoldedNormSlotDoubles + cuda::folded_norm_word(line, r)] != 0.0)
        return false;
  return true;
}

// A folded norm on both twins, started by fold_rmsnorm from `residual` [n, d] into sum slot 0 (the
// device's slots start as garbage: the chain must not read what it did not write).
struct FoldedRows {
  std::vector<float> residual, gain, scaled;
  std::vector<double> sum_sq;
  cuda::DeviceBuffer d_residual, d_gain, d_scaled, d_sums;

  kernels::FoldedNorm cpu() { return {scaled.data(), sum_sq.data(), gain.data(), 1e-5f}; }
  cuda::FoldedNorm device(int slot) const {
    return cuda::folded_norm(d_scaled.as<__nv_bfloat16>(), d_sums.as<double>(), slot,
                             d_gain.as<__nv_bfloat16>(), 1e-5f);
  }
};

inline FoldedRows folded_rows(std::vector<float> residual, std::vector<float> gain, int n, int d) {
  FoldedRows f;
  f.residual = std::move(residual);
  f.gain = std::move(gain);
  f.scaled.resize(size_t(n) * d);
  f.sum_sq.resize(n);
  kernels::fold_rmsnorm(f.residual.data(), n, d, f.cpu());
  // The device stores bf16(v · gain) (check_fold_rmsnorm checks that); the CPU twin keeps f32. The
  // products after the norm then take the device's inputs on both sides, so that their rows measure
  // the products alone: with f32 inputs one 49,152-entry logit row differed by 2^-8-relative input
  // roundings summed over 576 terms, past the products' bound.
  for (float& v : f.scaled) v = round_bf16(v);
  f.d_residual = to_device(f.residual);
  f.d_gain = to_device_bf16(f.gain);
  f.d_scaled = cuda::DeviceBuffer(f.scaled.size() * 2, "scaled");
  f.d_sums = to_device(std::vector<double>(cuda::kFoldedNormSumsDoubles, 123.0));
  cuda::fold_rmsnorm(f.d_residual.as<float>(), n, d, f.device(0), nullptr);
  cuda::check(cudaDeviceSynchronize(), "fold_rmsnorm");
  return f;
}

// Residual rows of scale 3 and gains of scale 1, as a layer's.
inline FoldedRows random_folded_rows(int n, int d) {
  return folded_rows(random_bf16_values(size_t(n) * d, 76, 3.0f), random_bf16_values(d, 77), n, d);
}

// The scaled rows bit-equal, Σv² on slot 0's line 0 and the other lines zero.
inline void check_fold_rmsnorm(int n, int d) {
  const FoldedRows f = random_folded_rows(n, d);
  std::vector<float> want(f.scaled.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = round_bf16(f.scaled[i]);
  EXPECT_EQ(from_device_bf16(f.d_scaled, want.size()), want);
  const auto words = from_device<double>(f.d_sums, cuda::kFoldedNormSumsDoubles);
  for (int r = 0; r < n; ++r) {
    EXPECT_NEAR(words[cuda::folded_norm_word(0, r)], f.sum_sq[r], 1e-5 * f.sum_sq[r]) << r;
    for (int line = 1; line < cuda::kFoldedNormLines; ++line)
      EXPECT_EQ(words[cuda::folded_norm_word(line, r)], 0.0) << "row " << r << " line " << line;
  }
}

// The product after the norm (slot 0) zeroes slot 1, which the next producer adds into.
inline void check_folded_matmul(int n, int d, int out) {
  FoldedRows f = random_folded_rows(n, d);
  const auto w = random_bf16_values(size_t(out) * d, 78, 0.1f);
  std::vector<float> expected(size_t(n) * out);
  kernels::matmul(f.cpu(), w.data(), expected.data(), n, d, out);
  auto d_w = to_device_bf16(w);
  cuda::DeviceBuffer d_y(expected.size() * 2, "y");
  cuda::matmul(f.device(0), d_w.as<__nv_bfloat16>(), d_y.as<__nv_bfloat16>(), n, d, out, nullptr);
  cuda::check(cudaDeviceSynchronize(), "folded matmul");
  expect_product_near(from_device_bf16(d_y, expected.size()), expected, kBf16Output,
                      folded_bound(d));
  EXPECT_TRUE(folded_slot_zero(f.d_sums, 1, n)) << "the other slot is zeroed";
}

inline void check_folded_gate_up_swiglu(int n, int d, int ffn) {
  FoldedRows f = random_folded_rows(n, d);
  const auto w = random_bf16_values(size_t(2) * ffn * d, 79, 0.1f);
  std::vector<float> gate_up(size_t(n) * 2 * ffn), expected(size_t(n) * ffn);
  kernels::gate_up_swiglu(f.cpu(), w.data(), gate_up.data(), expected.data(), n, d, ffn);
  auto d_w = to_device_bf16(w);
  cuda::DeviceBuffer d_out(expected.size() * 2, "out");
  cuda::gate_up_swiglu(f.device(0), d_w.as<__nv_bfloat16>(), d_out.as<__nv_bfloat16>(), n, d, ffn,
                       nullptr);
  cuda::check(cudaDeviceSynchronize(), "folded gate_up_swiglu");
  expect_swiglu_near(from_device_bf16(d_out, expected.size()), expected, gate_up, ffn,
                     folded_bound(d));
  EXPECT_TRUE(folded_slot_zero(f.d_sums, 1, n)) << "the other slot is zeroed";
}

// Residual row r = 30 w[t_r], gains in [0.75, 1.25]: the normalised row points along w[t_r], whose
// logit (≈ in / 17) leads the others (standard deviation ≈ sqrt(in) / 17) by sqrt(in) of them.
inline void check_folded_lm_head_argmax(int n, int d, int vocab) {
  const auto w = random_bf16_values(size_t(vocab) * d, 80, 0.1f);
  std::vector<float> residual(size_t(n) * d), gain = random_bf16_values(d, 81, 0.25f);
  for (float& g : gain) g = round_bf16(1.0f + g);
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < d; ++j)
      residual[size_t(r) * d + j] = 30 * w[size_t(planted_row(r, vocab)) * d + j];
  FoldedRows f = folded_rows(std::move(residual), std::move(gain), n, d);
  std::vector<float> logits(size_t(n) * vocab);
  std::vector<int32_t> next(n);
  kernels::lm_head_argmax(f.cpu(), w.data(), logits.data(), n, d, vocab, next.data());
  for (int r = 0; r < n; ++r) ASSERT_EQ(next[r], planted_row(r, vocab)) << "row " << r;
  auto d_w = to_device_bf16(w);
  auto d_best = to_device(std::vector<unsigned long long>(n, 0));
  cuda::DeviceBuffer d_logits(logits.size() * 4, "logits"), d_next(size_t(n) * 4, "next");
  cuda::lm_head_argmax(f.device(0), d_w.as<__nv_bfloat16>(), d_logits.as<float>(), n, d, vocab,
                       d_best.as<unsigned long long>(), d_next.as<int32_t>(), nullptr);
  cuda::check(cudaDeviceSynchronize(), "folded lm_head_argmax");
  expect_product_near(from_device<float>(d_logits, logits.size()), logits, kF32Output,
                      folded_bound(d));
  EXPECT_EQ(from_device<int32_t>(d_next, n), next);
  EXPECT_EQ(from_device<unsigned long long>(d_best, n), std::vector<unsigned long long>(n, 0));
}

// residual += bf16(x · wᵀ) and the next norm folded into slot 1 (zero before, as the product after
// the previous norm leaves it). The residual is off by the product's rounding (|Δ| / 128 of the
// change) and its sums' bound; the scaled rows by a step and that error times the gain; Σv² by
// twice the relative error of v.
inline void check_matmul_into_residual(int n, int in, int out) {
  const auto x = random_bf16_values(size_t(n) * in, 82);
  const auto w = random_bf16_values(size_t(out) * in, 83, 0.1f);
  const auto residual = random_bf16_values(size_t(n) * out, 84, 3.0f);
  std::vector<float> gain = random_bf16_values(out, 85), want = residual, scaled(residual.size());
  std::vector<double> sum_sq(n);
  kernels::matmul_into_residual(x.data(), w.data(), want.data(), n, in, out,
                                {scaled.data(), sum_sq.data(), gain.data(), 1e-5f});
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w), d_gain = to_device_bf16(gain);
  auto d_residual = to_device(residual);
  auto d_sums = to_device(std::vector<double>(cuda::kFoldedNormSumsDoubles, 0.0));
  cuda::DeviceBuffer d_scaled(scaled.size() * 2, "scaled");
  cuda::matmul_into_residual(d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
                             d_residual.as<float>(), n, in, out,
                             cuda::folded_norm(d_scaled.as<__nv_bfloat16>(), d_sums.as<double>(), 1,
                                               d_gain.as<__nv_bfloat16>(), 1e-5f),
                             nullptr);
  cuda::check(cudaDeviceSynchronize(), "matmul_into_residual");
  const auto got = from_device<float>(d_residual, want.size());
  const auto got_scaled = from_device_bf16(d_scaled, scaled.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double tolerance = std::abs(want[i] - residual[i]) / 128 + product_bound(in);
    ASSERT_NEAR(got[i], want[i], tolerance) << "residual " << i;
    ASSERT_NEAR(got_scaled[i], scaled[i],
                std::abs(scaled[i]) / 128 + tolerance * std::abs(gain[i % out]))
        << "scaled " << i;
  }
  const std::vector<double> sums = folded_slot_sums(d_sums, 1, n);
  for (int r = 0; r < n; ++r) EXPECT_NEAR(sums[r], sum_sq[r], 1e-3 * sum_sq[r]) << "row " << r;
}

inline std::vector<OpCase> product_cases() {
  std::vector<OpCase> cases;
  struct Shape {
    int n, in, out;  // out: the output features, ffn or vocabulary
  };
  // n <= 4 with in % 8 == 0 takes the GEMV (an odd output count leaves a block part empty); in
  // 996 takes cuBLAS at any n, as do 5 rows and more.
  for (const Shape s : {Shape{1, 576, 1536}, Shape{4, 4096, 1001}, Shape{2, 996, 576},
                        Shape{5, 576, 1536}, Shape{17, 896, 4864}})
    cases.push_back({case_name("matmul_bf16_n", s.n, "_in", s.in, "_out", s.out),
                     [s] { check_matmul_bf16(s.n, s.in, s.out); }});
  for (const Shape s :
       {Shape{1, 576, 1536}, Shape{2, 896, 4864}, Shape{3, 4096, 1000}, Shape{4, 576, 1001},
        Shape{1, 4096, 14336}, Shape{2, 996, 1536}, Shape{5, 576, 1536}, Shape{12, 4096, 1000}})
    cases.push_back({case_name("gate_up_swiglu_n", s.n, "_in", s.in, "_ffn", s.out),
                     [s] { check_gate_up_swiglu(s.n, s.in, s.out); }});
  // SmolLM2's vocabulary; an odd one past a block; in 100 takes cuBLAS; 6 and 16 rows the unfused
  // product and argmax_rows.
  for (const Shape s : {Shape{1, 576, 49152}, Shape{4, 1024, 50001}, Shape{3, 96, 1001},
                        Shape{2, 100, 1001}, Shape{6, 576, 49152}, Shape{16, 576, 5000}})
    cases.push_back({case_name("lm_head_argmax_n", s.n, "_in", s.in, "_vocab", s.out),
                     [s] { check_lm_head_argmax(s.n, s.in, s.out); }});
  // The folded norms run only in the decode GEMV: 1 to 4 rows, in % 8 == 0.
  for (const Shape s : {Shape{1, 576, 0}, Shape{4, 896, 0}, Shape{3, 4096, 0}, Shape{2, 5000, 0}})
    cases.push_back(
        {case_name("fold_rmsnorm_n", s.n, "_d", s.in), [s] { check_fold_rmsnorm(s.n, s.in); }});
  for (const Shape s : {Shape{1, 576, 576}, Shape{2, 896, 1000}, Shape{4, 4096, 1536}})
    cases.push_back({case_name("matmul_folded_n", s.n, "_d", s.in, "_out", s.out),
                     [s] { check_folded_matmul(s.n, s.in, s.out); }});
  for (const Shape s : {Shape{1, 576, 1536}, Shape{3, 896, 4864}, Shape{4, 4096, 1001}})
    cases.push_back({case_name("gate_up_swiglu_folded_n", s.n, "_d", s.in, "_ffn", s.out),
                     [s] { check_folded_gate_up_swiglu(s.n, s.in, s.out); }});
  for (const Shape s : {Shape{1, 576, 49152}, Shape{4, 896, 30001}, Shape{2, 4096, 1001}})
    cases.push_back({case_name("lm_head_argmax_folded_n", s.n, "_d", s.in, "_vocab", s.out),
                     [s] { check_folded_lm_head_argmax(s.n, s.in, s.out); }});
  // The o projection (576 -> 576), the down projections of SmolLM2 and Qwen2.5-0.5B, an odd width.
  for (const Shape s :
       {Shape{1, 576, 576}, Shape{4, 1536, 576}, Shape{2, 4864, 896}, Shape{3, 1000, 1001}})
    cases.push_back({case_name("matmul_into_residual_n", s.n, "_in", s.in, "_out", s.out),
                     [s] { check_matmul_into_residual(s.n, s.in, s.out); }});
  return cases;
}

}  // namespace kvb::test
