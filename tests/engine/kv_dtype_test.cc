// The CPU engine over an f16 / bf16 KV cache (engine/kv_store.h) against independent truth: the
// naive double forward of tests/engine/tiny_model.h with every key and value rounded to the
// dtype's significant bits, and the f32 engine's own keys rounded the same way for what the
// prefill policies read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/forward.h"
#include "tests/engine/tiny_model.h"

namespace kvb {
namespace {

struct Dtype {
  KvDtype dtype;
  int significant_bits;
};
const Dtype kSixteenBit[] = {{KvDtype::kF16, 11}, {KvDtype::kBf16, 8}};

double largest_difference(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Prefill past one 64-query block, a chunk over the cache and decode steps: the cache holds the
// rounded reference's keys and values, and each step's logits lie closer to the rounded reference
// than to the unrounded one. Not bit for bit: the engine's f32 sums (in its BLAS's order, which
// the BLAS picks by processor) put the odd value on the other side of a rounding boundary, and
// the later tokens and layers carry that flip into the logits (here up to 0.011 with OpenBLAS's
// Haswell kernels, against 5e-4 with its SkylakeX ones; 4x that apart from the unrounded one).
TEST(KvDtype, ForwardOverA16BitCacheIsTheForwardOnRoundedKeysAndValues) {
  test::TinyShape shape;
  shape.head_dim = 16;
  shape.n_query_heads = 4;
  shape.d_model = 64;
  const ModelWeights w = test::tiny_model(shape, 31);
  const auto ids = test::random_token_ids(76, w.config.vocab_size, 3);
  for (const Dtype& d : kSixteenBit) {
    SCOPED_TRACE(kv_dtype_name(d.dtype));
    test::ReferenceKv rounded_kv;
    const auto rounded =
        test::reference_logits(w, ids, {}, 0, d.significant_bits, false, &rounded_kv);
    const auto exact = test::reference_logits(w, ids);
    CpuEngine engine(w, d.dtype);
    KvStore store = engine.make_store();
    std::vector<std::vector<float>> logits(ids.size());
    logits[69] = engine.forward_chunk(std::span(ids).first(70), store, {}, nullptr);
    logits[72] = engine.forward_chunk(std::span(ids).subspan(70, 3), store, {}, nullptr);
    CachePlan full;
    for (int t = 73; t < 76; ++t) logits[t] = engine.decode_step(ids[t], t, t - 73, store, full);
    EXPECT_FALSE(store.holds_f32());
    const double share_equal = test::share_of_kv_equal(store, rounded_kv);
    std::printf("[ kv dtype ] %s: %.4f of keys and values equal to the rounded reference's\n",
                kv_dtype_name(d.dtype).c_str(), share_equal);
    // One flip in layer 0 reaches most of layer 1's rows: 98.7% equal with the Haswell kernels,
    // 99.97% with the SkylakeX ones; a cache that kept f32 values or rounded another way holds
    // few of the rounded values.
    EXPECT_GE(share_equal, 0.95);
    for (int t : {69, 72, 73, 74, 75}) {
      const double to_rounded = largest_difference(logits[t], rounded[t]);
      EXPECT_LT(to_rounded, 0.05) << "position " << t;
      EXPECT_GT(largest_difference(logits[t], exact[t]), 4 * to_rounded) << "position " << t;
    }
  }
}

// The prefill policies read an f32 copy holding exactly the cache's rounded values: layer 0's
// keys and values are the f32 engine's rounded to the dtype (later layers differ, since their
// inputs passed through attention on rounded entries).
TEST(KvDtype, PolicyViewOfA16BitCacheHoldsTheRoundedValues) {
  const ModelWeights w = test::tiny_model(test::TinyShape{}, 37);
  const auto ids = test::random_token_ids(50, w.config.vocab_size, 4);
  const CaptureRequest request{4, false, false};
  CpuBackend reference(w);
  reference.reserve(1, 50);
  PrefillCapture f32_capture;
  reference.prefill(0, ids, request, f32_capture);
  for (const Dtype& d : kSixteenBit) {
    SCOPED_TRACE(kv_dtype_name(d.dtype));
    CpuBackend backend(w, d.dtype);
    backend.reserve(2, 50);
    PrefillCapture capture;
    backend.prefill(0, ids, request, capture);
    backend.fork(0, 1);  // a cell's fork, made before the view
    KvStore host_copy;
    const PrefillView view = backend.prefill_view(0, capture, request, host_copy);
    EXPECT_EQ(host_copy.n_layers(), 0);          // no copy: the prompt is widened in place
    EXPECT_FALSE(backend.store(1).holds_f32());  // and the fork stays 16-bit
    const int n = w.config.head_dim * 50;
    for (int h = 0; h < w.config.n_kv_heads; ++h) {
      const float* keys = reference.store(0).keys(0, h);
      const float* values = reference.store(0).values(0, h);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(view.layers[0].keys[h][i],
                  static_cast<float>(test::round_to_significant_bits(keys[i], d.significant_bits)))
            << "head " << h << " element " << i;
        ASSERT_EQ(view.layers[0].values[h][i], static_cast<float>(test::round_to_significant_bits(
                                                   values[i], d.significant_bits)));
      }
    }
    EXPECT_EQ(backend.kv_bytes(0), reference.kv_bytes(0) / 2);  // the cache it will decode from
    EXPECT_EQ(backend.host_store(0).kv_bytes(), reference.kv_bytes(0));  // an f32 copy
    // Compaction narrows it back, with the kept entries' rounded values.
    const KeptIndices every(w.config.n_layers,
                            std::vector<std::vector<int32_t>>(w.config.n_kv_heads, {0, 7, 49}));
    const float kept_key = view.layers[1].keys[0][7 * w.config.head_dim];
    backend.compact(0, every, 0);
    ASSERT_FALSE(backend.store(0).holds_f32());
    EXPECT_EQ(backend.store(0).widened().keys(1, 0)[w.config.head_dim], kept_key);
    EXPECT_EQ(backend.kv_bytes(0), reference.kv_bytes(0) / 2 * 3 / 50);
  }
}

}  // namespace
}  // namespace kvb
