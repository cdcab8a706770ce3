// CpuEngine against an independent double-precision forward pass (tests/engine/tiny_model.h) on
// random tiny models: prefill, chunks over a cache, decode steps, captures, selection, eviction.
#include "engine/cpu/forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/errors.h"
#include "tests/engine/tiny_model.h"

namespace kvb {
namespace {

using test::reference_logits;
using test::tiny_model;
using test::TinyShape;

std::vector<int> random_ids(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int> ids(n);
  for (auto& id : ids) id = pick(rng);
  return ids;
}

void expect_logits_near(const std::vector<float>& actual, const std::vector<double>& expected,
                        double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tolerance) << i;
}

class ForwardShapes : public ::testing::TestWithParam<TinyShape> {};

TEST_P(ForwardShapes, PrefillMatchesReference) {
  const ModelWeights w = tiny_model(GetParam(), 7);
  CpuEngine engine(w);
  const auto ids = random_ids(70, w.config.vocab_size, 1);  // > one 64-query attention block
  KvStore store = engine.make_store();
  const auto logits = engine.forward_chunk(ids, store, {}, nullptr);
  expect_logits_near(logits, reference_logits(w, ids).back(), 2e-4);
  EXPECT_EQ(store.length(1, w.config.n_kv_heads - 1), 70);
  EXPECT_EQ(store.positions(0, 0)[69], 69);
}

TEST_P(ForwardShapes, ChunksAndDecodeStepsMatchOnePrefill) {
  const ModelWeights w = tiny_model(GetParam(), 11);
  CpuEngine engine(w);
  const auto ids = random_ids(40, w.config.vocab_size, 2);
  const auto reference = reference_logits(w, ids);
  KvStore store = engine.make_store();
  engine.forward_chunk(std::span(ids).first(25), store, {}, nullptr);
  const auto chunk = engine.forward_chunk(std::span(ids).subspan(25, 12), store, {}, nullptr);
  expect_logits_near(chunk, reference[36], 2e-4);
  CachePlan full;
  for (int t = 37; t < 40; ++t) {
    const auto step = engine.decode_step(ids[t], t, t - 37, store, full);
    expect_logits_near(step, reference[t], 2e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ForwardShapes,
    ::testing::Values(TinyShape{}, TinyShape{.n_kv_heads = 4},
                      TinyShape{
                          .n_query_heads = 6, .n_kv_heads = 2, .qkv_bias = true, .tied = false},
                      TinyShape{.interleaved = true}, TinyShape{.llama3 = true},
                      TinyShape{.n_kv_heads = 1, .head_dim = 16}));

TEST(Forward, CapturesWindowQueriesAndColumnSums) {
  const ModelWeights w = tiny_model(TinyShape{}, 3);
  CpuEngine engine(w);
  const auto ids = random_ids(20, w.config.vocab_size, 4);
  KvStore store = engine.make_store();
  PrefillCapture capture;
  CaptureRequest request{.window_queries = 5, .attention_column_sums = true};
  engine.forward_chunk(ids, store, request, &capture);
  ASSERT_EQ(capture.window, 5);
  ASSERT_EQ(capture.length, 20);
  const int d = w.config.head_dim, Hq = w.config.n_query_heads;
  for (int l = 0; l < w.config.n_layers; ++l) {
    // Column sums: every query's probabilities sum to 1, so the total is L per head; the last
    // key is seen only by the last query.
    for (int a = 0; a < Hq; ++a) {
      const float* sums = &capture.column_sums[l][a * 20];
      EXPECT_NEAR(std::accumulate(sums, sums + 20, 0.0), 20.0, 1e-4);
      // Recompute the last query's attention from the captured query and the stored keys.
      const int h = a / w.config.group_size();
      const float* query = &capture.query_window[l][(a * 5 + 4) * d];
      std::vector<double> s(20);
      double mx = -1e300, z = 0;
      for (int j = 0; j < 20; ++j) {
        double dotp = 0;
        for (int i = 0; i < d; ++i) dotp += query[i] * store.keys(l, h)[j * d + i];
        mx = std::max(mx, s[j] = dotp / std::sqrt(double(d)));
      }
      for (auto& e : s) z += (e = std::exp(e - mx));
      EXPECT_NEAR(sums[19], s[19] / z, 1e-5);
    }
  }
  const PrefillView view = make_prefill_view(w, &store, capture, request);
  ASSERT_EQ(view.layers.size(), 2u);
  EXPECT_EQ(view.prompt_length(), 20);
  EXPECT_EQ(view.layers[1].keys[1], store.keys(1, 1));
  EXPECT_EQ(view.layers[0].query(2, 4), &capture.query_window[0][(2 * 5 + 4) * d]);
  EXPECT_EQ(view.layers[0].output_projection, nullptr);
}

// A selector that lets query head a see only the entries listed for its KV head.
class FixedSelector : public DecodeSelector {
 public:
  explicit FixedSelector(std::vector<int32_t> kept) : kept_(std::move(kept)) {}
  std::string name() const override { return "fixed"; }
  void start(const KvStore&, int prompt_length, int) override { prompt_length_ = prompt_length; }
  void on_append(const KvStore& store, int) override { last_length_ = store.length(0, 0); }
  void select(int layer, const float*, const KvStore& store, Selection& out) override {
    out.dense = layer == 0;  // layer 0 dense, as selectors' dense_layers do
    std::vector<int32_t> indices = kept_;
    indices.push_back(store.length(layer, 0) - 1);  // the token itself
    out.indices.assign(store.n_kv_heads() * 2, indices);
  }
  int last_length_ = 0;
  int prompt_length_ = 0;

 private:
  std::vector<int32_t> kept_;
};

TEST(Forward, DecodeSelectionMatchesRestrictedReference) {
  const ModelWeights w = tiny_model(TinyShape{}, 5);
  CpuEngine engine(w);
  auto ids = random_ids(31, w.config.vocab_size, 6);
  KvStore store = engine.make_store();
  engine.forward_chunk(std::span(ids).first(30), store, {}, nullptr);
  const std::vector<int32_t> kept = {0, 3, 4, 17, 29};
  auto selector = std::make_shared<FixedSelector>(kept);
  CachePlan plan;
  plan.selector = selector;
  const auto logits = engine.decode_step(ids[30], 30, 0, store, plan);
  EXPECT_EQ(selector->last_length_, 31);
  // Reference: layer 0 dense; layer 1 sees kept + itself. Compute by restricting layer 1 only.
  test::AllowedPositions allowed(2, std::vector<std::vector<int>>(2));
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 30; ++j) allowed[0][h].push_back(j);
    allowed[1][h].assign(kept.begin(), kept.end());
  }
  expect_logits_near(logits, reference_logits(w, ids, allowed, 30).back(), 2e-4);
}

// An eviction policy that records the probabilities it is given and evicts entry 1 of head 0.
class RecordingEviction : public DecodeEvictionPolicy {
 public:
  std::string name() const override { return "recording"; }
  void start(const KvStore&, int, int) override {}
  void after_step(const DecodeStepView& step, KvStore& store) override {
    const int group = static_cast<int>(step.probabilities.size()) / store.n_kv_heads();
    for (size_t a = 0; a < step.probabilities.size(); ++a) {
      const float* p = step.probabilities[a];
      sums.push_back(std::accumulate(p, p + store.length(step.layer, a / group), 0.0));
    }
    store.erase(step.layer, 0, 1);
  }
  std::vector<double> sums;
};

TEST(Forward, DecodeEvictionSeesProbabilitiesAndShrinksTheCache) {
  const ModelWeights w = tiny_model(TinyShape{}, 8);
  CpuEngine engine(w);
  const auto ids = random_ids(12, w.config.vocab_size, 9);
  KvStore store = engine.make_store();
  engine.forward_chunk(std::span(ids).first(10), store, {}, nullptr);
  auto eviction = std::make_shared<RecordingEviction>();
  CachePlan plan;
  plan.decode_eviction = eviction;
  engine.decode_step(ids[10], 10, 0, store, plan);
  engine.decode_step(ids[11], 11, 1, store, plan);
  ASSERT_EQ(eviction->sums.size(), 2u * 2 * 4);
  for (double s : eviction->sums) EXPECT_NEAR(s, 1.0, 1e-5);
  EXPECT_EQ(store.length(0, 0), 10);  // 10 + 2 appended - 2 evicted
  EXPECT_EQ(store.length(0, 1), 12);
  EXPECT_EQ(store.positions(1, 0)[1], 3);  // entries 1 and 2 (positions 1, 2) were evicted
  EXPECT_EQ(next_position(store), 12);
}

TEST(Forward, ContextOverflowIsCapacityError) {
  const ModelWeights w = tiny_model(TinyShape{.max_context = 16}, 1);
  CpuEngine engine(w);
  KvStore store = engine.make_store();
  const auto ids = random_ids(17, w.config.vocab_size, 1);
  try {
    engine.forward_chunk(ids, store, {}, nullptr);
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("17"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine.forward_chunk(std::vector<int>{0, 61}, store, {}, nullptr), InputError);
}

}  // namespace
}  // namespace kvb
