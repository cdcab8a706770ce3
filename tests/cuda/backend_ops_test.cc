// Every CUDA op against its CPU twin of the same name (kernels/cuda/X ↔ kernels/cpu/X) over a table
// of shapes, in the habit of llama.cpp's test-backend-ops: one parametrised test, one row per (op,
// shape), named "<op>_<shape>" so that a filter picks an op:
//   kvb_cuda_tests --gtest_filter='BackendOps/*'           every row
//   kvb_cuda_tests --gtest_filter='BackendOps/*/rope_*'    one op
// The shapes take the head dims and widths of the models the project runs (SmolLM2-135M: d 576,
// 9/3 heads of 64, FFN 1536; Qwen2.5-Coder-0.5B: d 896, 14/2 heads of 64, FFN 4864; Qwen2.5-7B:
// d 3584, 28/4 heads of 128, FFN 18944, QKV bias; Llama-3.1-8B: d 4096, 32/8 heads of 128, FFN
// 14336, llama3 RoPE; tiny-llama: 4/2 heads of 16), odd sizes (lengths off the kernels' tiles and
// blocks, one key, one query, widths not a multiple of the vector loads) and the kernels' own
// boundaries (decode vs prefill row counts, cluster and split sizes of the top-k).
// Each row skips without a GPU.
//
// Tolerances. The inputs are bf16 values (cuda_test_util.h), so both twins read the same numbers;
// what differs is the arithmetic, and each comparison allows what its kernel's arithmetic explains:
// - bit-equal where the device computes the CPU's sums in the CPU's order on the same values: q.k
//   scores (one FMA per term, dimension order), page bounds (min/max of bf16 values are bf16
//   values) and page scores, BinaryPC's codes and integer scores (queries packed in the kernel),
//   top-k indices;
// - one bf16 rounding of the device's output where the CPU twin stays f32: half a bf16 step is
//   2^-9 relative, so SwiGLU allows |x| / 128 + 1e-3 (a whole step plus the device's __expf),
//   RoPE 1.6e-2 on values below 4 (a step, plus f32 angles at position 131,000 where the CPU
//   takes them in double), RMSNorm 3e-2 on outputs up to ~6 (residuals of scale 3);
// - attention (backend_ops_attention.h): the probabilities are rounded to bf16 before the P.V
//   tensor-core product (2^-9 relative per weight, averaging over the keys) and the output once
//   more: 1e-2 absolute for decode (values of scale 1), 2e-2 for the prefill's longer rows, 2e-3 on
//   the f32 log-sum-exp (another summation order, exp2 on the special-function unit);
// - f32 sums in another order: 1e-5 relative for row norms, 1e-4 for the projected value norms
//   (cuBLAS products), 1e-3 for the column sums (exp2 of f32 logits); DropKV 3e-2 relative, its p
//   being rounded to bf16 on both sides and so able to land on either side of a rounding boundary;
// - window attention sums (backend_ops_attention.h): with the bf16 reference's casts, on inputs
//   whose q.k are exact in fp32, 1/128 relative (a p may round to the other bf16 neighbour, expf
//   and the normaliser's summation order differing in the last bits); in fp32 1e-4 relative;
// - LSH sampling (lsh_sampling_check.h): codes and lists bit-equal, means within an f32 ulp,
//   biases within 1e-5 (the device's acos, pow and log against libm's);
// - decode eviction (backend_ops_eviction.h): probabilities 1e-6 relative (expf), statistics the
//   same sums in the same order, kept entries and compacted rows exact;
// - the forward pass's data ops (backend_ops_forward.h): gathers, appends, lengths and the seeded
//   generator exact; the fused RoPE + append as RoPE above;
// - the products with bf16 output and the fused and folded products (backend_ops_products.h): the
//   matmul bound below plus one bf16 step, SwiGLU's through its slope, the folded rows' rounding
//   before the norm's scale, argmax indices exact.
#include "tests/cuda/backend_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/projected_value_norms.h"
#include "kernels/cpu/query_key_scores.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/row_norms.h"
#include "kernels/cpu/transformer_ops.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/projected_value_norms.h"
#include "kernels/cuda/query_key_scores.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/row_norms.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/backend_ops_attention.h"
#include "tests/cuda/backend_ops_eviction.h"
#include "tests/cuda/backend_ops_forward.h"
#include "tests/cuda/backend_ops_products.h"
#include "tests/cuda/backend_ops_selection.h"
#include "tests/cuda/backend_ops_topk.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/lsh_sampling_check.h"

namespace kvb::test {
namespace {

// add_rmsnorm (residual += delta, then the norm) against its CPU twin; a row set without a delta
// too, which is the plain norm. Weights of scale `weight_scale` (1: outputs up to ~2.3; 3: up to
// ~5.5, still in the bf16 binade [4, 8) whose half step, 0.0156, the tolerance covers).
void check_add_rmsnorm(int rows, int dim, bool with_delta, float weight_scale = 1.0f) {
  const auto residual = random_bf16_values(size_t(rows) * dim, 1, 3.0f);
  const auto delta = random_bf16_values(size_t(rows) * dim, 2);
  const auto weight = random_bf16_values(dim, 3, weight_scale);
  std::vector<float> summed = residual, expected(residual.size());
  kernels::add_rmsnorm(summed.data(), with_delta ? delta.data() : nullptr, weight.data(), rows, dim,
                       1e-5f, expected.data());
  auto d_residual = to_device(residual);
  auto d_delta = to_device_bf16(delta), d_weight = to_device_bf16(weight);
  cuda::DeviceBuffer d_out(summed.size() * 2);
  cuda::add_rmsnorm(d_residual.as<float>(), with_delta ? d_delta.as<__nv_bfloat16>() : nullptr,
                    d_weight.as<__nv_bfloat16>(), rows, dim, 1e-5f, d_out.as<__nv_bfloat16>(),
                    nullptr);
  EXPECT_LT(max_abs_diff(from_device<float>(d_residual, summed.size()), summed), 1e-5);
  EXPECT_LT(max_abs_diff(from_device_bf16(d_out, summed.size()), expected), 3e-2);
}

struct RopeShape {
  int n_query_heads, n_kv_heads, head_dim;
  bool interleaved, llama3, bias;
};

// apply_rope against the bias rounded to bf16 (as the device stores the row), then apply_rope.
void check_rope(const RopeShape& s) {
  const int d = s.head_dim, width = (s.n_query_heads + 2 * s.n_kv_heads) * d;
  const std::vector<int32_t> positions = {0, 1, 5, 100, 4095, 30000, 131000};
  const int rows = static_cast<int>(positions.size());
  const auto qkv = random_bf16_values(size_t(rows) * width, 4);
  const auto bias = random_bf16_values(width, 5);
  const auto freq = s.llama3 ? kernels::rope_inverse_frequencies_llama3(d, 500000.f, {})
                             : kernels::rope_inverse_frequencies(d, 10000.f);
  std::vector<float> expected = qkv;
  for (int r = 0; r < rows; ++r) {
    float* row = expected.data() + size_t(r) * width;
    if (s.bias)
      for (int j = 0; j < width; ++j) row[j] = round_bf16(row[j] + bias[j]);
    kernels::apply_rope(
        row, s.n_query_heads + s.n_kv_heads, d, d, positions[r], freq.data(),
        s.interleaved ? kernels::RopePairing::kInterleavedPairs : kernels::RopePairing::kHalves);
  }
  auto d_qkv = to_device_bf16(qkv), d_bias = to_device_bf16(bias);
  auto d_positions = to_device(positions);
  auto d_freq = to_device(freq);
  cuda::apply_rope({.qkv = d_qkv.as<__nv_bfloat16>(),
                    .bias = s.bias ? d_bias.as<__nv_bfloat16>() : nullptr,
                    .positions = d_positions.as<int32_t>(),
                    .inv_freq = d_freq.as<float>(),
                    .n = rows,
                    .n_query_heads = s.n_query_heads,
                    .n_kv_heads = s.n_kv_heads,
                    .head_dim = d,
                    .interleaved = s.interleaved},
                   nullptr);
  // V heads untouched (biased only); Q and K within bf16 rounding of the rotated values.
  EXPECT_LT(max_abs_diff(from_device_bf16(d_qkv, qkv.size()), expected), 1.6e-2);
}

void check_swiglu(int rows, int ffn) {
  const auto gate_up = random_bf16_values(size_t(rows) * 2 * ffn, 6, 4.0f);
  std::vector<float> expected(size_t(rows) * ffn);
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up.data() + size_t(r) * 2 * ffn;
    kernels::swiglu(gate, gate + ffn, ffn, expected.data() + size_t(r) * ffn);
  }
  auto d_in = to_device_bf16(gate_up);
  cuda::DeviceBuffer d_out(expected.size() * 2);
  cuda::swiglu(d_in.as<__nv_bfloat16>(), rows, ffn, d_out.as<__nv_bfloat16>(), nullptr);
  const auto got = from_device_bf16(d_out, expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], std::abs(expected[i]) / 128 + 1e-3) << "element " << i;
}

// Heads at a cache-like stride (spare rows after each).
void check_row_norms(int heads, int length, int dim) {
  const int64_t stride = int64_t(length + 100) * dim;
  const auto rows = random_bf16_values(size_t(heads) * stride, 9, 2.0f);
  std::vector<float> want(size_t(heads) * length);
  kernels::row_norms({rows.data(), stride, heads, length, dim, want.data()});
  const auto device_rows = to_device_bf16(rows);
  cuda::DeviceBuffer norms(want.size() * 4, "norms");
  cuda::row_norms({device_rows.as<__nv_bfloat16>(), stride, heads, length, dim, norms.as<float>()},
                  nullptr);
  const auto got = from_device<float>(norms, want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * want[i]) << i;
}

// A batch of two with different lengths; -inf from each slot's length to the width.
void check_query_key_scores(int hq, int hkv, int d) {
  const int batch = 2, capacity = 300, width = 320, group = hq / hkv;
  const std::vector<int32_t> per_sequence = {300, 173};
  const auto q = random_bf16_values(size_t(batch) * hq * d, 5);
  const auto keys = random_bf16_values(size_t(batch) * hkv * capacity * d, 6, 2.0f);
  std::vector<int32_t> lengths;
  for (int b = 0; b < batch; ++b) lengths.insert(lengths.end(), hkv, per_sequence[b]);
  auto d_q = to_device_bf16(q), d_keys = to_device_bf16(keys);
  auto d_lengths = to_device(lengths);
  const int lists = batch * hq;
  cuda::DeviceBuffer d_scores(size_t(lists) * width * 4);
  cuda::query_key_scores({.q = d_q.as<__nv_bfloat16>(),
                          .q_seq_stride = int64_t(hq) * d,
                          .keys = d_keys.as<__nv_bfloat16>(),
                          .key_slot_stride = int64_t(capacity) * d,
                          .batch = batch,
                          .n_query_heads = hq,
                          .n_kv_heads = hkv,
                          .head_dim = d,
                          .lengths = d_lengths.as<int32_t>(),
                          .width = width,
                          .scores = d_scores.as<float>(),
                          .score_stride = width},
                         nullptr);
  const auto got = from_device<float>(d_scores, size_t(lists) * width);
  std::vector<float> want(capacity);
  for (int b = 0; b < batch; ++b)
    for (int a = 0; a < hq; ++a) {
      const int slot = b * hkv + a / group, length = lengths[slot];
      kernels::query_key_scores(q.data() + (int64_t(b) * hq + a) * d,
                                keys.data() + int64_t(slot) * capacity * d, length, d, want.data());
      const float* row = got.data() + (int64_t(b) * hq + a) * width;
      for (int j = 0; j < length; ++j)
        ASSERT_EQ(row[j], want[j]) << "sequence " << b << " head " << a << " key " << j;
      for (int j = length; j < width; ++j)
        ASSERT_TRUE(std::isinf(row[j]) && row[j] < 0) << "sequence " << b << " key " << j;
    }
}

struct ProjectedShape {
  int n_query_heads, n_kv_heads, dim, hidden, length;
};

void check_projected_value_norms(const ProjectedShape& s) {
  const int64_t head_stride = int64_t(s.length + 5) * s.dim;  // spare rows, as a cache has
  const auto values = random_bf16_values(size_t(head_stride) * s.n_kv_heads, 17);
  const auto wo = random_bf16_values(size_t(s.hidden) * s.n_query_heads * s.dim, 23,
                                     1.0f / std::sqrt(float(s.dim)));
  std::vector<float> expected(size_t(s.n_kv_heads) * s.length);
  for (int h = 0; h < s.n_kv_heads; ++h)
    kernels::projected_value_norms({.values = values.data() + h * head_stride,
                                    .output_projection = wo.data(),
                                    .n_query_heads = s.n_query_heads,
                                    .n_kv_heads = s.n_kv_heads,
                                    .kv_head = h,
                                    .length = s.length,
                                    .dim = s.dim,
                                    .hidden = s.hidden,
                                    .norms = expected.data() + int64_t(h) * s.length});
  const auto d_values = to_device_bf16(values), d_wo = to_device_bf16(wo);
  cuda::DeviceBuffer norms(expected.size() * 4, "norms");
  cuda::DeviceBuffer workspace(cuda::projected_value_norms_workspace_floats(s.hidden) * 4, "ws");
  cublasHandle_t cublas;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  cuda::projected_value_norms(cublas,
                              {.values = d_values.as<__nv_bfloat16>(),
                               .head_stride = head_stride,
                               .output_projection = d_wo.as<__nv_bfloat16>(),
                               .n_query_heads = s.n_query_heads,
                               .n_kv_heads = s.n_kv_heads,
                               .length = s.length,
                               .dim = s.dim,
                               .hidden = s.hidden,
                               .norms = norms.as<float>(),
                               .workspace = workspace.as<float>()},
                              nullptr);
  cuda::check(cudaDeviceSynchronize(), "projected_value_norms");
  cublasDestroy(cublas);
  const auto got = from_device<float>(norms, expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], 1e-4 * std::abs(expected[i]) + 1e-5) << "entry " << i;
}

// The bf16 GEMM (matmul_f32out, kernels/cuda/transformer_ops.h; decode_gemv.cu for up to 4 rows)
// against matmul, its CPU twin: f32 sums of `in` bf16 products in another order, 1e-3 at in 576
// growing with sqrt(in) (a random walk of rounding errors). For 5 to kSkinnyMaxRows rows the
// opt-in tensor-core kernel (matmul_skinny_mma) is held to the same bound.
void check_matmul(int n, int in, int out) {
  const auto x = random_bf16_values(size_t(n) * in, 7);
  const auto w = random_bf16_values(size_t(out) * in, 8, 0.1f);
  std::vector<float> expected(size_t(n) * out);
  kernels::matmul(x.data(), n, in, w.data(), out, nullptr, expected.data());
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w);
  cuda::DeviceBuffer d_y(expected.size() * 4);
  const CublasHandle cublas;
  cuda::matmul_f32out(cublas.get(), d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(),
                      d_y.as<float>(), n, in, out, nullptr);
  cuda::check(cudaDeviceSynchronize(), "matmul_f32out");
  const double bound = product_bound(in);
  EXPECT_LT(max_abs_diff(from_device<float>(d_y, expected.size()), expected), bound);
  if (n < 5 || n > cuda::kSkinnyMaxRows) return;
  cuda::matmul_skinny_mma(d_x.as<__nv_bfloat16>(), d_w.as<__nv_bfloat16>(), d_y.as<float>(), n, in,
                          out, nullptr);
  cuda::check(cudaDeviceSynchronize(), "matmul_skinny_mma");
  EXPECT_LT(max_abs_diff(from_device<float>(d_y, expected.size()), expected), bound)
      << "tensor-core kernel";
}

// argmax_rows against its CPU twin, exact: random bf16 logits, and in each row the maximum planted
// twice (positions r and vocab - 1 - r), so the lowest index of a tie must win.
void check_argmax_rows(int rows, int vocab) {
  auto logits = random_bf16_values(size_t(rows) * vocab, 11, 4.0f);
  for (int r = 0; r < rows; ++r) {
    float* row = logits.data() + size_t(r) * vocab;
    const int a = r % vocab, b = vocab - 1 - r % vocab;
    row[a] = row[b] = 100.0f + r;
  }
  std::vector<int32_t> expected(rows);
  kernels::argmax_rows(logits.data(), rows, vocab, expected.data());
  auto d_logits = to_device(logits);
  cuda::DeviceBuffer d_next(size_t(rows) * 4);
  cuda::argmax_rows(d_logits.as<float>(), rows, vocab, d_next.as<int32_t>(), nullptr);
  EXPECT_EQ(from_device<int32_t>(d_next, rows), expected);
}

// f32_to_bf16 and bf16_to_f32 against the CPU's scalar twins (kernels/cpu/dequantize.h), bit for
// bit: f32 values over the whole exponent range, exact halfway cases (low 16 bits 0x8000, where
// round-to-nearest-even decides) and infinities; every bf16 pattern that is not a NaN.
void check_conversions(int count) {
  std::mt19937 rng(12);
  std::vector<float> f32(count);
  for (int i = 0; i < count; ++i) {
    uint32_t bits = rng();
    if (i % 4 == 0) bits = (bits & 0xFFFF0000u) | 0x8000u;
    if ((bits & 0x7F800000u) == 0x7F800000u) bits &= 0xFF800000u;  // NaN -> infinity
    std::memcpy(&f32[i], &bits, 4);
  }
  std::vector<uint16_t> want16(count);
  for (int i = 0; i < count; ++i) want16[i] = kvb::f32_to_bf16(f32[i]);
  auto d_f32 = to_device(f32);
  cuda::DeviceBuffer d_bf16(size_t(count) * 2);
  cuda::f32_to_bf16(d_f32.as<float>(), count, d_bf16.as<__nv_bfloat16>(), nullptr);
  EXPECT_EQ(from_device<uint16_t>(d_bf16, count), want16);

  std::vector<uint16_t> patterns;
  for (uint32_t b = 0; b < 0x10000u; ++b)
    if ((b & 0x7F80u) != 0x7F80u || (b & 0x7Fu) == 0) patterns.push_back(uint16_t(b));
  std::vector<uint32_t> want32(patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) {
    const float value = kvb::bf16_to_f32(patterns[i]);
    std::memcpy(&want32[i], &value, 4);
  }
  auto d_patterns = to_device(patterns);
  cuda::DeviceBuffer d_out(patterns.size() * 4);
  cuda::bf16_to_f32(d_patterns.as<__nv_bfloat16>(), patterns.size(), d_out.as<float>(), nullptr);
  EXPECT_EQ(from_device<uint32_t>(d_out, patterns.size()), want32);
}

// Two or three sizes of one case.
struct Size2 {
  int a, b;
};
struct Size3 {
  int a, b, c;
};

std::vector<OpCase> element_wise_cases() {
  std::vector<OpCase> cases;
  // 5 rows take the one-block-per-row decode kernel, 300 the vectorised prefill kernel (a width
  // not a multiple of 4 takes the decode kernel at 300 rows too); 5,000 is one past a whole number
  // of the decode kernel's 1,024 threads.
  for (const Size2 s :
       {Size2{1, 576}, Size2{5, 576}, Size2{5, 896}, Size2{5, 4096}, Size2{5, 5000}, Size2{17, 64},
        Size2{300, 576}, Size2{300, 3584}, Size2{300, 4096}, Size2{300, 8192}, Size2{300, 5002}})
    cases.push_back({case_name("add_rmsnorm_rows", s.a, "_dim", s.b),
                     [s] { check_add_rmsnorm(s.a, s.b, true); }});
  for (const Size2 s : {Size2{5, 576}, Size2{300, 576}})
    cases.push_back({case_name("add_rmsnorm_nodelta_rows", s.a, "_dim", s.b),
                     [s] { check_add_rmsnorm(s.a, s.b, false); }});
  // The rows above cannot see the norm's scale or sum off by one: a mean over d - 1, or a sum of
  // squares missing its first, last or last 4 terms, moves every output by ~1/(2d) relative, at
  // most 0.02 on outputs of ~2.2 (0.005-0.009 at d >= 576), under the 3e-2 that a bf16 rounding
  // needs. Short rows with weights of scale 3 (outputs up to ~5.5) on each kernel (5 rows: the
  // one-block kernel; 17: the vectorised one) move by 0.087-0.58 under those errors.
  for (const Size2 s : {Size2{5, 32}, Size2{17, 32}})
    cases.push_back({case_name("add_rmsnorm_rows", s.a, "_dim", s.b, "_weights3"),
                     [s] { check_add_rmsnorm(s.a, s.b, true, 3.0f); }});
  std::vector<RopeShape> rope = {{9, 3, 64, false, false, false},   // SmolLM2
                                 {14, 2, 64, false, false, true},   // Qwen2.5-Coder-0.5B
                                 {28, 4, 128, false, false, true},  // Qwen2.5-7B
                                 {32, 8, 128, false, true, false},  // Llama-3.1-8B
                                 {32, 8, 128, true, true, false},   // Llama-3.1-8B, GGUF rows
                                 {4, 2, 16, true, false, false}};   // tiny-llama
  for (int variant = 0; variant < 8; ++variant)  // every pairing x scaling x bias
    rope.push_back({4, 2, 128, (variant & 1) != 0, (variant & 2) != 0, (variant & 4) != 0});
  for (const RopeShape& s : rope)
    cases.push_back({case_name("rope_hq", s.n_query_heads, "_hkv", s.n_kv_heads, "_d", s.head_dim,
                               s.interleaved ? "_interleaved" : "_halves",
                               s.llama3 ? "_llama3" : "", s.bias ? "_bias" : ""),
                     [s] { check_rope(s); }});
  // The 16-byte path (ffn a multiple of 8), the one-value path (1001), and more rows than a grid's
  // y extent (70,000 > 65,535), so the row loop wraps.
  for (const Size2 s : {Size2{3, 1536}, Size2{2, 1001}, Size2{70000, 16}, Size2{1, 4864},
                        Size2{4, 14336}, Size2{2, 18944}, Size2{5, 128}})
    cases.push_back({case_name("swiglu_rows", s.a, "_ffn", s.b), [s] { check_swiglu(s.a, s.b); }});
  // n <= 4 takes the GEMV kernel, with 1 to 8 warps per row (short rows and a down projection's
  // long ones; an output count that leaves the last block part empty; a last pass of one chunk).
  // 5 to 16 (cuBLAS, and the opt-in tensor-core kernel): one or two n-tiles, partial ones, an
  // output count that leaves a 16-row tile part empty, k slices that end inside a 32-wide step
  // (2056, 1000); 17 and more take cuBLAS.
  for (const Size3 s :
       {Size3{1, 576, 1536}, Size3{3, 576, 1536}, Size3{4, 576, 1536}, Size3{17, 576, 1536},
        Size3{256, 576, 1536}, Size3{1, 14336, 1536}, Size3{4, 8192, 1536}, Size3{2, 4096, 1001},
        Size3{1, 4096, 28672}, Size3{3, 2056, 17000}, Size3{2, 1000, 20000}, Size3{5, 576, 1536},
        Size3{8, 4096, 1001}, Size3{9, 14336, 1536}, Size3{10, 4096, 6144}, Size3{16, 2056, 17000},
        Size3{12, 1000, 20000}, Size3{7, 576, 49152}})
    cases.push_back({case_name("matmul_n", s.a, "_in", s.b, "_out", s.c),
                     [s] { check_matmul(s.a, s.b, s.c); }});
  // One row; the decode step's batch of rows; SmolLM2's and Qwen2.5's vocabularies; a vocabulary
  // below the block's thread count.
  for (const Size2 s : {Size2{1, 49152}, Size2{16, 49152}, Size2{3, 151936}, Size2{5, 100}})
    cases.push_back(
        {case_name("argmax_rows_rows", s.a, "_vocab", s.b), [s] { check_argmax_rows(s.a, s.b); }});
  for (const int count : {1, 1000, (1 << 20) + 3})
    cases.push_back(
        {case_name("f32_to_bf16_bf16_to_f32_count", count), [count] { check_conversions(count); }});
  return cases;
}

std::vector<OpCase> statistic_cases() {
  std::vector<OpCase> cases;
  // heads, length, dim
  for (const Size3 s :
       {Size3{3, 1000, 64}, Size3{3, 1000, 128}, Size3{3, 1000, 40}, Size3{8, 1, 128}})
    cases.push_back({case_name("row_norms_heads", s.a, "_length", s.b, "_dim", s.c),
                     [s] { check_row_norms(s.a, s.b, s.c); }});
  // hq, hkv, head_dim
  for (const Size3 s : {Size3{8, 8, 64}, Size3{8, 2, 128}, Size3{16, 2, 64}, Size3{9, 3, 64},
                        Size3{14, 2, 64}, Size3{32, 8, 128}})
    cases.push_back({case_name("query_key_scores_hq", s.a, "_hkv", s.b, "_d", s.c),
                     [s] { check_query_key_scores(s.a, s.b, s.c); }});
  // GQA groups 1, 2, 3 and 7; one row, an odd count, more than one product chunk (kProjectedRows).
  for (const ProjectedShape s :
       {ProjectedShape{4, 2, 64, 256, 1}, ProjectedShape{4, 2, 64, 256, 37},
        ProjectedShape{2, 2, 128, 256, 300}, ProjectedShape{9, 3, 64, 576, 500},
        ProjectedShape{14, 2, 64, 896, cuda::kProjectedRows + 33}})
    cases.push_back({case_name("projected_value_norms_hq", s.n_query_heads, "_hkv", s.n_kv_heads,
                               "_d", s.dim, "_hidden", s.hidden, "_length", s.length),
                     [s] { check_projected_value_norms(s); }});
  return cases;
}

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases;
  for (auto part :
       {element_wise_cases(), statistic_cases(), forward_data_cases(), product_cases(),
        attention_cases(), selection_cases(), topk_cases(), lsh_sampling_cases(), eviction_cases()})
    cases.insert(cases.end(), part.begin(), part.end());
  return cases;
}

class BackendOpsTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(BackendOpsTest, MatchesCpuTwin) {
  KVB_REQUIRE_GPU();
  GetParam().check();
}

INSTANTIATE_TEST_SUITE_P(BackendOps, BackendOpsTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace kvb::test
