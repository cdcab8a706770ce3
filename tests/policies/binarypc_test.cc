// BinaryPC: bit-plane scoring, Algorithm 2 hashing, Algorithm 1 fitting, the projection file and
// the selector (docs/methods.md §12).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "common/errors.h"
#include "kernels/cpu/binary_hash.h"
#include "kernels/cpu/matmul.h"
#include "policies/binarypc_projection.h"
#include "policies/decode_selectors.h"
#include "policies/registry.h"
#include "tests/policies/decode_test_util.h"

namespace kvb {
namespace {

using namespace kernels;  // NOLINT: the kernel under test

TEST(BinaryHash, BitPlaneScoreEqualsIntegerDotProduct) {
  std::mt19937_64 generator(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int heads = 1 + trial % 4;
    const std::vector<float> projected =
        test::random_vector(static_cast<size_t>(heads) * kBinaryHashBits, 100 + trial, 3.0f);
    std::vector<QuantizedQuery> queries(heads);
    quantize_query_group(projected.data(), heads, queries.data());
    int group_max = 0;
    for (const QuantizedQuery& query : queries)
      for (int8_t value : query.values) group_max = std::max(group_max, std::abs(int{value}));
    EXPECT_EQ(group_max, 127) << "one scale per group maps the largest |p| to 127";
    for (int c = 0; c < 20; ++c) {
      const uint64_t code = generator();
      std::vector<int> expected_group(heads);
      for (int a = 0; a < heads; ++a) {
        int dot = 0;
        for (int i = 0; i < kBinaryHashBits; ++i)
          dot += queries[a].values[i] * (((code >> i) & 1) ? -1 : 1);
        EXPECT_EQ(binary_hash_score(queries[a], code), dot);
        expected_group[a] = dot;
      }
      int group_score = 0;
      binary_score_keys(queries.data(), heads, &code, 1, &group_score);
      EXPECT_EQ(group_score, *std::max_element(expected_group.begin(), expected_group.end()));
    }
  }
}

TEST(BinaryHash, QuantisationRoundsHalfToEvenWithOneScalePerGroup) {
  std::vector<float> projected(2 * kBinaryHashBits, 0.0f);
  projected[0] = 2.5f;  // scale = 127 / 127 = 1
  projected[1] = 3.5f;
  projected[2] = -2.5f;
  projected[kBinaryHashBits + 5] = -127.0f;  // the group maximum sits in the second head
  std::vector<QuantizedQuery> queries(2);
  quantize_query_group(projected.data(), 2, queries.data());
  EXPECT_EQ(queries[0].values[0], 2);
  EXPECT_EQ(queries[0].values[1], 4);
  EXPECT_EQ(queries[0].values[2], -2);
  EXPECT_EQ(queries[1].values[5], -127);
  EXPECT_EQ(queries[0].sign_plane, uint64_t{1} << 2);
  EXPECT_EQ(queries[1].sign_plane, uint64_t{1} << 5);
}

// Rows +-e_i: the bit of row i is set exactly when the key's component i is negative (LSB first),
// and a zero projection is stored as h = +1.
TEST(BinaryHash, PacksLeastSignificantBitFirstAndSignZeroIsPlusOne) {
  const int d = 64;
  std::vector<float> projection(kBinaryHashBits * d, 0.0f);
  for (int i = 0; i < kBinaryHashBits; ++i) projection[i * d + i] = 0.5f;
  std::vector<float> key(d, 1.0f);
  key[0] = -1.0f;
  key[63] = -3.0f;
  key[10] = 0.0f;  // exactly zero projection on row 10
  float norms[kBinaryHashBits + 1];
  const uint64_t code = binary_hash_key(projection.data(), d, key.data(), norms);
  EXPECT_EQ(code, (uint64_t{1} << 0) | (uint64_t{1} << 63));
  // Row 10 left the residual unchanged (PyTorch's sign(0) = 0 in the update)...
  EXPECT_FLOAT_EQ(norms[11], norms[10]);
  // ...but the reconstruction decodes bit 0 as +1: component 10 is reconstructed as +0.5.
  std::vector<float> reconstructed_diff(d);
  double expected = 0;
  for (int t = 0; t < d; ++t) {
    const double h = ((code >> t) & 1) ? -1.0 : 1.0;
    expected += (key[t] - 0.5 * h) * (key[t] - 0.5 * h);
  }
  EXPECT_NEAR(binary_hash_reconstruction_error(projection.data(), d, key.data(), code),
              std::sqrt(expected), 1e-5);
}

// Keys with a few dominant directions, like post-RoPE keys.
std::vector<float> structured_keys(int n, int d, uint64_t seed) {
  std::vector<float> keys = test::random_vector(static_cast<size_t>(n) * d, seed);
  for (int j = 0; j < n; ++j)
    for (int t = 0; t < 8; ++t)
      keys[static_cast<size_t>(j) * d + t] = keys[static_cast<size_t>(j) * d + t] * 6.0f + 2.0f;
  return keys;
}

// On the keys P was calibrated on (OPC: u recomputed as sign(R P[i])), Algorithm 2 retraces
// Algorithm 1, whose update removes L ||P[i]||^2 from the total squared residual at every bit:
// the summed residual can never grow. (A single key's residual can: ||r - sP||^2 =
// ||r||^2 - 2|r.P| + ||P||^2, so the invariant is over the calibration set.)
TEST(BinaryHash, Algorithm2ResidualNeverGrowsOverCalibrationKeys) {
  const int n = 400, d = 32;
  const std::vector<float> keys = structured_keys(n, d, 11);
  std::vector<float> projection(kBinaryHashBits * d);
  BinaryProjectionFit fit;
  fit.recompute_signs = true;
  fit_binary_projection(keys.data(), n, d, fit, projection.data());
  std::vector<double> total(kBinaryHashBits + 1, 0.0);
  float norms[kBinaryHashBits + 1];
  for (int j = 0; j < n; ++j) {
    binary_hash_key(projection.data(), d, keys.data() + static_cast<size_t>(j) * d, norms);
    for (int b = 0; b <= kBinaryHashBits; ++b) total[b] += double{norms[b]} * norms[b];
  }
  for (int b = 1; b <= kBinaryHashBits; ++b)
    EXPECT_LE(total[b], total[b - 1] * (1 + 1e-6)) << "bit " << b - 1;
  EXPECT_LT(total[kBinaryHashBits], 0.5 * total[0]) << "64 bits should explain most of the energy";
}

TEST(BinaryPcProjection, FileRoundTripsAndRejectsBadFiles) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvb_binarypc_test";
  std::filesystem::create_directories(dir);
  BinaryProjectionSet set(2, 3, 8);
  set.calibration_tokens = 1234;
  for (size_t i = 0; i < set.rows.size(); ++i) set.rows[i] = static_cast<float>(i) * 0.25f;
  set.save(dir / "proj.bin");
  const BinaryProjectionSet loaded = BinaryProjectionSet::load(dir / "proj.bin");
  EXPECT_EQ(loaded.n_layers, 2);
  EXPECT_EQ(loaded.n_kv_heads, 3);
  EXPECT_EQ(loaded.head_dim, 8);
  EXPECT_EQ(loaded.calibration_tokens, 1234u);
  EXPECT_EQ(loaded.rows, set.rows);
  EXPECT_EQ(loaded.head(1, 2)[0], set.rows[(1 * 3 + 2) * 64 * 8]);

  EXPECT_THROW(BinaryProjectionSet::load(dir / "absent.bin"), InputError);
  std::filesystem::resize_file(dir / "proj.bin", 100);
  EXPECT_THROW(BinaryProjectionSet::load(dir / "proj.bin"), FormatError);
  std::ofstream(dir / "text.bin") << "not a projection file at all, just some text";
  EXPECT_THROW(BinaryProjectionSet::load(dir / "text.bin"), FormatError);
  std::filesystem::remove_all(dir);
}

TEST(BinaryPcSelector, BadParametersAreClearErrors) {
  const Budget budget = Budget::parse("64");
  EXPECT_THROW(make_binarypc_selector({{"bits", 32}}, budget), InputError);
  EXPECT_THROW(make_binarypc_selector({{"projection", "/nonexistent/proj.bin"}}, budget),
               InputError);
  EXPECT_THROW(make_binarypc_selector({{"err_ratio", -0.1}}, budget), InputError);
  EXPECT_THROW(make_binarypc_selector({{"unknown", 1}}, budget), InputError);
  // A projection of the wrong shape is refused when the cache is seen.
  auto wrong = std::make_shared<BinaryProjectionSet>(1, 1, 16);
  auto selector =
      make_binarypc_selector({{"dense_layers", nlohmann::json::array()}}, budget, wrong);
  const KvStore store = test::random_store(2, 2, 32, 100, 3);
  EXPECT_THROW(selector->start(store, 100, 64), InputError);
}

// A sweep builds one plan per cell and run; with one PlanFiles they share one read of the OPC
// file. The file is removed after the first plan: later plans must not touch the disk.
TEST(BinaryPcSelector, PlanFilesReadTheProjectionFileOnce) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvb_bpc_plan_files";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "proj.bin";
  BinaryProjectionSet projection(2, 2, 16);
  const std::vector<float> rows = test::random_vector(projection.rows.size(), 5);
  std::copy(rows.begin(), rows.end(), projection.rows.begin());
  projection.save(path);
  const nlohmann::json params = {{"projection", path.string()},
                                 {"dense_layers", nlohmann::json::array()}};
  PlanFiles files;
  CachePlan first = make_cache_plan("binarypc", params, Budget::parse("8"), &files);
  std::filesystem::remove_all(dir);
  CachePlan second = make_cache_plan("binarypc", params, Budget::parse("8"), &files);
  EXPECT_EQ(files.files_read(), 1);
  EXPECT_THROW(make_cache_plan("binarypc", params, Budget::parse("8")), InputError);  // no file
  // Both plans hash with the file's rows: the same store gives the same selection.
  const KvStore store = test::random_store(2, 2, 16, 40, 9);
  const std::vector<float> query = test::random_vector(2 * 16, 10);
  std::vector<Selection> picked;
  for (CachePlan* plan : {&first, &second}) {
    plan->selector->start(store, 40, 8);
    picked.push_back(test::empty_selection(2));
    plan->selector->select(1, query.data(), store, picked.back());
  }
  EXPECT_EQ(picked[0].indices, picked[1].indices);
  EXPECT_EQ(picked[0].indices[0].size(), 8u);
  const auto& described = dynamic_cast<const DescribedDecodeSelector&>(*second.selector);
  EXPECT_EQ(described.describe()["projection_fit"], "offline (OPC)");
  EXPECT_EQ(described.describe()["budget"], "8");
}

// Selection shape: k prompt keys (S_err inside) plus every decode token, shared by the group.
TEST(BinaryPcSelector, KeepsBudgetPlusDecodeTokensSharedAcrossTheGroup) {
  const int layers = 3, kv_heads = 2, group = 3, d = 32, prompt = 300, budget = 40;
  KvStore store = test::random_store(layers, kv_heads, d, prompt, 5);
  auto selector = make_binarypc_selector({}, Budget::parse(std::to_string(budget)));
  selector->start(store, prompt, budget);
  EXPECT_EQ(selector->describe()["gqa"], "shared");
  EXPECT_EQ(selector->describe()["dense_layers"], nlohmann::json({0, 1}));
  // Two decode tokens.
  for (int step = 0; step < 2; ++step) {
    const std::vector<float> k = test::random_vector(kv_heads * d, 50 + step);
    for (int layer = 0; layer < layers; ++layer) {
      store.append(layer, prompt + step, k.data(), k.data());
      selector->on_append(store, layer);
    }
  }
  const std::vector<float> query =
      test::random_vector(static_cast<size_t>(kv_heads) * group * d, 9);
  Selection dense = test::empty_selection(kv_heads * group);
  selector->select(0, query.data(), store, dense);
  EXPECT_TRUE(dense.dense);
  Selection selection = test::empty_selection(kv_heads * group);
  selector->select(2, query.data(), store, selection);
  EXPECT_FALSE(selection.dense);
  for (int a = 0; a < kv_heads * group; ++a) {
    const std::vector<int32_t>& kept = selection.indices[a];
    EXPECT_EQ(kept, selection.indices[(a / group) * group]);
    ASSERT_EQ(kept.size(), static_cast<size_t>(budget + 2));
    EXPECT_EQ(kept[budget], prompt);
    EXPECT_EQ(kept[budget + 1], prompt + 1);
    EXPECT_EQ(std::set<int32_t>(kept.begin(), kept.end()).size(), kept.size());
  }
}

// The device form: online, no rows but each selecting (layer, KV head)'s start vectors, drawn
// with the seed start() fits that head with (seed * 1000003 + 131 layer + head), so that the
// device's fit (kernels/cuda/binary_hash.h, binary_fit_projection, the same sums in the same
// order) gives start()'s rows; dense layers {0, 1} get zeros. With an OPC file: its rows.
TEST(BinaryPcSelector, DeviceSpecCarriesEachHeadsStartVectorsOrTheGivenRows) {
  ModelConfig model;
  model.n_layers = 4;
  model.n_kv_heads = 2;
  model.head_dim = 64;
  auto selector = make_binarypc_selector({{"seed", 3}, {"iterations", 5}}, Budget::parse("100"));
  const std::optional<DeviceSelectionSpec> spec = selector->device_selection(model, 100);
  ASSERT_TRUE(spec.has_value());
  EXPECT_TRUE(spec->sign_codes.projection.empty());
  const DeviceSelectionSpec::SignCodes::Fit& fit = spec->sign_codes.fit;
  EXPECT_EQ(fit.iterations, 5);
  EXPECT_FALSE(fit.recompute_signs);
  const size_t head_rows = static_cast<size_t>(kBinaryHashBits) * model.head_dim;
  ASSERT_EQ(fit.starts.size(), head_rows * model.n_layers * model.n_kv_heads);
  for (int layer = 0; layer < model.n_layers; ++layer)
    for (int h = 0; h < model.n_kv_heads; ++h) {
      std::vector<float> expected(head_rows, 0.0f);
      if (layer >= 2)
        expected =
            kernels::binary_fit_starts(3u * 1000003u + uint64_t(layer) * 131u + h, model.head_dim);
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(),
                             fit.starts.begin() + (layer * model.n_kv_heads + h) * head_rows))
          << "layer " << layer << " head " << h;
    }
  // The fit from those starts is the one start() runs (policies/binarypc_projection.h).
  const KvStore store = test::random_store(1, 1, model.head_dim, 300, 31);
  BinaryProjectionFit seeded;
  seeded.seed = 77;
  std::vector<float> by_policy(head_rows), by_kernel(head_rows);
  fit_binary_projection(store.keys(0, 0), 300, model.head_dim, seeded, by_policy.data());
  const std::vector<float> starts = kernels::binary_fit_starts(77, model.head_dim);
  kernels::binary_fit_projection(store.keys(0, 0), 300, model.head_dim, starts.data(), {},
                                 by_kernel.data());
  EXPECT_EQ(by_policy, by_kernel);

  auto given = std::make_shared<BinaryProjectionSet>(model.n_layers, model.n_kv_heads, 64);
  for (size_t i = 0; i < given->rows.size(); ++i) given->rows[i] = 0.001f * float(i % 97);
  auto with_rows = make_binarypc_selector({}, Budget::parse("100"), given);
  const auto opc = with_rows->device_selection(model, 100);
  ASSERT_TRUE(opc.has_value());
  EXPECT_EQ(opc->sign_codes.projection, given->rows);
  EXPECT_TRUE(opc->sign_codes.fit.starts.empty());
}

// EAS: the err_k = int(0.1 k) keys with the largest reconstruction error are always selected,
// even against a query that scores them lowest; without EAS they compete like any other key.
TEST(BinaryPcSelector, ErrorAwareSafeguardAlwaysKeepsWorstReconstructedKeys) {
  const int d = 32, prompt = 400, budget = 50;
  KvStore store = test::random_store(1, 1, d, prompt, 21);
  // Give 5 keys a huge norm: they reconstruct worst, and a query anti-aligned with them ranks
  // them last.
  std::vector<float> direction = test::random_vector(d, 22);
  const std::vector<int32_t> outliers = {17, 80, 151, 222, 390};
  for (int32_t j : outliers)
    for (int t = 0; t < d; ++t) store.mutable_keys(0, 0)[j * d + t] = 40.0f * direction[t];
  std::vector<float> query(d);
  for (int t = 0; t < d; ++t) query[t] = -direction[t];
  const nlohmann::json no_dense = {{"dense_layers", nlohmann::json::array()}};
  auto with_eas = make_binarypc_selector(no_dense, Budget::parse("50"));
  with_eas->start(store, prompt, budget);
  Selection selection = test::empty_selection(1);
  with_eas->select(0, query.data(), store, selection);
  for (int32_t j : outliers)
    EXPECT_TRUE(std::count(selection.indices[0].begin(), selection.indices[0].end(), j)) << j;

  nlohmann::json off = no_dense;
  off["eas"] = false;
  auto without = make_binarypc_selector(off, Budget::parse("50"));
  without->start(store, prompt, budget);
  without->select(0, query.data(), store, selection);
  for (int32_t j : outliers)
    EXPECT_FALSE(std::count(selection.indices[0].begin(), selection.indices[0].end(), j)) << j;
}

// The hash ranking must carry signal: on keys with a planted relevant subset, BinaryPC at a 12.5%
// budget recalls most of the exact top-32 logits (random selection would recall 12.5%).
TEST(BinaryPcSelector, RecallsMostOfTheExactTopLogits) {
  const int d = 64, prompt = 512, budget = 64, top = 32;
  KvStore store = test::random_store(1, 1, d, prompt, 31);
  const nlohmann::json params = {{"dense_layers", nlohmann::json::array()}, {"eas", false}};
  auto selector = make_binarypc_selector(params, Budget::parse("64"));
  selector->start(store, prompt, budget);
  double recalled = 0;
  const int trials = 20;
  for (int trial = 0; trial < trials; ++trial) {
    // A query close to a random key of the cache, as attention queries are to their targets.
    const int target = (trial * 37) % prompt;
    std::vector<float> query = test::random_vector(d, 1000 + trial, 0.5f);
    for (int t = 0; t < d; ++t) query[t] += store.keys(0, 0)[target * d + t];
    std::vector<float> logits(prompt);
    for (int j = 0; j < prompt; ++j) {
      float dot = 0;
      for (int t = 0; t < d; ++t) dot += query[t] * store.keys(0, 0)[j * d + t];
      logits[j] = dot;
    }
    std::vector<int32_t> order = test::all_indices(prompt);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    Selection selection = test::empty_selection(1);
    selector->select(0, query.data(), store, selection);
    const std::set<int32_t> kept(selection.indices[0].begin(), selection.indices[0].end());
    for (int r = 0; r < top; ++r) recalled += kept.count(order[r]);
    EXPECT_TRUE(kept.count(target)) << "trial " << trial;
  }
  EXPECT_GT(recalled / (trials * top), 0.4);
}

}  // namespace
}  // namespace kvb
