// CaptureRequest::layer_inputs and CpuEngine::force_layer_inputs (engine/cpu/forward.h), the pair
// a layer-aligned comparison of two backends rests on (tests/cuda/cuda_backend_test.cc):
// - the captured inputs are the residual stream entering each layer: layer 0's rows are the
//   embeddings, and forcing a forward's own inputs back reproduces it bit for bit;
// - a forced layer starts from its forced rows alone: two runs whose forced inputs differ in the
//   early layers only agree bit for bit from the first layer they share on, and differ before it;
// - inputs that do not cover a chunk's layers and positions are refused, naming the fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "engine/cpu/forward.h"
#include "tests/engine/tiny_model.h"

namespace kvb {
namespace {

test::TinyShape four_layers() {
  test::TinyShape s;
  s.n_layers = 4;
  return s;
}

struct Forward {
  std::vector<float> logits;
  KvStore store;
  PrefillCapture capture;
};

// A prefill of `ids` on a fresh engine (bf16 cache, the device's rounding points) that captures
// its layer inputs, starting each layer from `forced` when given.
Forward prefill(const ModelWeights& w, const std::vector<TokenId>& ids,
                const std::vector<std::vector<float>>* forced = nullptr) {
  CpuEngine engine(w, KvDtype::kBf16, ForwardPrecision::kBf16Device);
  engine.force_layer_inputs(forced);
  Forward f{{}, engine.make_store(), {}};
  CaptureRequest request;
  request.layer_inputs = true;
  f.logits = engine.forward_chunk(ids, f.store, request, &f.capture);
  f.store.widen();
  return f;
}

bool same_keys_and_values(const KvStore& a, const KvStore& b, int layer) {
  const size_t n = static_cast<size_t>(a.length(layer, 0)) * a.head_dim();
  for (int h = 0; h < a.n_kv_heads(); ++h)
    if (!std::equal(a.keys(layer, h), a.keys(layer, h) + n, b.keys(layer, h)) ||
        !std::equal(a.values(layer, h), a.values(layer, h) + n, b.values(layer, h)))
      return false;
  return true;
}

TEST(LayerInputs, CapturedInputsForcedBackReproduceTheForwardBitForBit) {
  const ModelWeights w = test::tiny_model(four_layers(), 5);
  const auto ids = test::random_token_ids(40, w.config.vocab_size, 11);
  const Forward free = prefill(w, ids);
  const ModelConfig& c = w.config;
  ASSERT_EQ(free.capture.layer_inputs.size(), static_cast<size_t>(c.n_layers));
  for (const std::vector<float>& rows : free.capture.layer_inputs)
    EXPECT_EQ(rows.size(), ids.size() * c.d_model);
  // Layer 0's input is the embedding rows (the bf16 copy the device-numerics engine computes with).
  CpuEngine engine(w, KvDtype::kBf16, ForwardPrecision::kBf16Device);
  std::vector<float> embedding(c.d_model);
  for (size_t t = 0; t < ids.size(); ++t) {
    engine.weights().token_embedding.row_to_f32(ids[t], c.d_model, embedding.data());
    EXPECT_TRUE(std::equal(embedding.begin(), embedding.end(),
                           free.capture.layer_inputs[0].begin() + t * c.d_model))
        << "token " << t;
  }
  // The later layers' inputs moved away from the embeddings.
  EXPECT_NE(free.capture.layer_inputs[1], free.capture.layer_inputs[0]);

  const Forward forced = prefill(w, ids, &free.capture.layer_inputs);
  EXPECT_EQ(forced.logits, free.logits);
  EXPECT_EQ(forced.capture.layer_inputs, free.capture.layer_inputs);
  for (int l = 0; l < c.n_layers; ++l)
    EXPECT_TRUE(same_keys_and_values(forced.store, free.store, l));
}

TEST(LayerInputs, AForcedLayerStartsFromItsForcedRowsAlone) {
  const ModelWeights w = test::tiny_model(four_layers(), 6);
  const auto ids = test::random_token_ids(30, w.config.vocab_size, 12);
  const Forward free = prefill(w, ids);
  // Layers 0 and 1 start from other rows (another prompt's), layers 2 and 3 from the free run's.
  const Forward other = prefill(w, test::random_token_ids(30, w.config.vocab_size, 13));
  std::vector<std::vector<float>> mixed = free.capture.layer_inputs;
  mixed[0] = other.capture.layer_inputs[0];
  mixed[1] = other.capture.layer_inputs[1];
  const Forward forced = prefill(w, ids, &mixed);
  EXPECT_FALSE(same_keys_and_values(forced.store, free.store, 0));
  EXPECT_FALSE(same_keys_and_values(forced.store, free.store, 1));
  EXPECT_TRUE(same_keys_and_values(forced.store, free.store, 2));
  EXPECT_TRUE(same_keys_and_values(forced.store, free.store, 3));
  EXPECT_EQ(forced.logits, free.logits);  // the last layer's input and weights decide them
}

TEST(LayerInputs, InputsThatDoNotCoverTheChunkAreRefused) {
  const ModelWeights w = test::tiny_model(four_layers(), 7);
  const auto ids = test::random_token_ids(20, w.config.vocab_size, 14);
  const Forward shorter = prefill(w, std::vector<TokenId>(ids.begin(), ids.begin() + 10));
  std::vector<std::vector<float>> too_few_layers = prefill(w, ids).capture.layer_inputs;
  too_few_layers.pop_back();
  using LayerRows = std::vector<std::vector<float>>;
  for (const LayerRows* inputs : {&shorter.capture.layer_inputs, &std::as_const(too_few_layers)}) {
    try {
      prefill(w, ids, inputs);
      ADD_FAILURE() << "forced inputs that do not cover the chunk were taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("CaptureRequest::layer_inputs"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace kvb
