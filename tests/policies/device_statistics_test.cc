// The device statistics of CaptureRequest (engine/cache_policy.h): a prefill view that holds only
// the statistics a policy asks for, computed here by brute force in double precision (the truth
// a device backend approximates), picks the kept sets the same policy picks from the prompt's keys
// and values (CriticalKV's ‖v W_o‖ included). Also the requests themselves: which policies may run
// without the keys on a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dropkv_scores.h"
#include "policies/registry.h"
#include "policies/scored_policy.h"
#include "synthetic_prefill.h"

namespace kvb {
namespace {

// One layer's softmax rows of the last `window` queries over their visible keys, in double:
// probabilities [Hq][w][L], log-sum-exp [Hq][w] and outputs y [Hq][w][d].
struct WindowAttention {
  std::vector<std::vector<std::vector<double>>> p, y;
  std::vector<std::vector<double>> lse;
};

WindowAttention window_attention_in_double(const LayerPrefillView& layer, int window) {
  const int L = layer.length, d = layer.head_dim;
  WindowAttention out;
  out.p.assign(layer.n_query_heads, std::vector<std::vector<double>>(window));
  out.y = out.p;
  out.lse.assign(layer.n_query_heads, std::vector<double>(window));
  for (int a = 0; a < layer.n_query_heads; ++a) {
    const float* keys = layer.keys[a / layer.group_size()];
    const float* values = layer.values[a / layer.group_size()];
    for (int t = 0; t < window; ++t) {
      const float* q = layer.query(a, layer.window - window + t);
      const int visible = L - window + t + 1;
      std::vector<double> logits(visible);
      for (int j = 0; j < visible; ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(q[i]) * keys[int64_t(j) * d + i];
        logits[j] = dot / std::sqrt(double(d));
      }
      const double top = *std::max_element(logits.begin(), logits.end());
      double total = 0;
      for (double x : logits) total += std::exp(x - top);
      out.lse[a][t] = top + std::log(total);
      out.p[a][t].assign(L, 0.0);
      out.y[a][t].assign(d, 0.0);
      for (int j = 0; j < visible; ++j) {
        const double p = std::exp(logits[j] - out.lse[a][t]);
        out.p[a][t][j] = p;
        for (int i = 0; i < d; ++i) out.y[a][t][i] += p * values[int64_t(j) * d + i];
      }
    }
  }
  return out;
}

// The statistics of one layer, owned, in the layout of PrefillCapture.
struct LayerStatistics {
  std::vector<float> window_sums;    // [Hq, L]
  std::vector<float> perturbations;  // [Hkv, L]
  std::vector<float> key_norms;      // [Hkv, L]
  std::vector<float> value_norms;    // [Hkv, L]: (1/g) Σ_a ‖v_j W_o^a‖₁
};

LayerStatistics statistics_of(const LayerPrefillView& layer, int window) {
  const int L = layer.length, d = layer.head_dim, hq = layer.n_query_heads;
  const WindowAttention attention = window_attention_in_double(layer, window);
  LayerStatistics s;
  s.window_sums.assign(size_t(hq) * L, 0.0f);
  for (int a = 0; a < hq; ++a)
    for (int j = 0; j < L; ++j) {
      double sum = 0;
      for (int t = 0; t < window; ++t) sum += attention.p[a][t][j];
      s.window_sums[size_t(a) * L + j] = static_cast<float>(sum);
    }
  // Output perturbations through the kernels' CPU contract, from the double-precision rows.
  std::vector<float> queries(size_t(hq) * window * d), outputs(queries.size()),
      lse(size_t(hq) * window);
  std::vector<float> keys, values;
  for (int a = 0; a < hq; ++a)
    for (int t = 0; t < window; ++t) {
      std::copy_n(layer.query(a, layer.window - window + t), d,
                  &queries[(size_t(a) * window + t) * d]);
      for (int i = 0; i < d; ++i)
        outputs[(size_t(a) * window + t) * d + i] = static_cast<float>(attention.y[a][t][i]);
      lse[size_t(a) * window + t] = static_cast<float>(attention.lse[a][t]);
    }
  for (int h = 0; h < layer.n_kv_heads; ++h) {
    keys.insert(keys.end(), layer.keys[h], layer.keys[h] + int64_t(L) * d);
    values.insert(values.end(), layer.values[h], layer.values[h] + int64_t(L) * d);
  }
  s.perturbations.assign(size_t(layer.n_kv_heads) * L, 0.0f);
  kernels::DropKvScoreArgs args{hq,
                                layer.n_kv_heads,
                                d,
                                L,
                                window,
                                queries.data(),
                                outputs.data(),
                                lse.data(),
                                keys.data(),
                                values.data(),
                                /*round_p_to_bf16=*/false,
                                s.perturbations.data()};
  kernels::dropkv_scores(args);
  s.key_norms.assign(size_t(layer.n_kv_heads) * L, 0.0f);
  for (int h = 0; h < layer.n_kv_heads; ++h)
    for (int j = 0; j < L; ++j) {
      double squared = 0;
      for (int i = 0; i < d; ++i)
        squared += double(layer.keys[h][int64_t(j) * d + i]) * layer.keys[h][int64_t(j) * d + i];
      s.key_norms[size_t(h) * L + j] = static_cast<float>(std::sqrt(squared));
    }
  const int g = layer.group_size(), inputs = hq * d;
  s.value_norms.assign(size_t(layer.n_kv_heads) * L, 0.0f);
  for (int h = 0; h < layer.n_kv_heads; ++h)
    for (int j = 0; j < L; ++j) {
      double nu = 0;
      for (int a = h * g; a < (h + 1) * g; ++a)
        for (int o = 0; o < layer.d_model; ++o) {
          double dot = 0;
          for (int i = 0; i < d; ++i)
            dot += double(layer.values[h][int64_t(j) * d + i]) *
                   layer.output_projection[int64_t(o) * inputs + a * d + i];
          nu += std::abs(dot) / g;
        }
      s.value_norms[size_t(h) * L + j] = static_cast<float>(nu);
    }
  return s;
}

// The synthetic prompt's view with its keys and values replaced by the statistics `request` asks
// for (what a device backend hands a policy).
PrefillView statistics_view(const test::SyntheticPrefill& prefill,
                            std::vector<LayerStatistics>& owned, const CaptureRequest& request) {
  PrefillView view = prefill.view;
  owned.clear();
  for (auto& layer : view.layers) owned.push_back(statistics_of(layer, prefill.window));
  for (size_t l = 0; l < view.layers.size(); ++l) {
    LayerPrefillView& layer = view.layers[l];
    for (const WindowSumsRequest& w : request.window_attention_sums) {
      EXPECT_EQ(w.window, prefill.window);
      EXPECT_FALSE(w.reference_bf16_casts);  // fp32 scoring: the sums in double are its truth
      layer.window_attention_sums.push_back({w, owned[l].window_sums.data()});
    }
    for (const PerturbationRequest& p : request.output_perturbations)
      layer.output_perturbations.push_back({p, owned[l].perturbations.data()});
    if (request.key_norms) layer.key_norms = owned[l].key_norms.data();
    if (request.projected_value_norms) layer.projected_value_norms = owned[l].value_norms.data();
    if (!request.host_keys_values) {
      layer.keys.clear();
      layer.values.clear();
      layer.output_projection = nullptr;
    }
  }
  return view;
}

double mean_jaccard(const KeptIndices& a, const KeptIndices& b) {
  double sum = 0;
  int heads = 0;
  for (size_t l = 0; l < a.size(); ++l)
    for (size_t h = 0; h < a[l].size(); ++h) {
      std::vector<int32_t> common;
      std::set_intersection(a[l][h].begin(), a[l][h].end(), b[l][h].begin(), b[l][h].end(),
                            std::back_inserter(common));
      const double joined = double(a[l][h].size() + b[l][h].size() - common.size());
      sum += joined == 0 ? 1.0 : common.size() / joined;
      ++heads;
    }
  return sum / heads;
}

TEST(DeviceStatistics, PoliciesKeepTheSameTokensFromTheirStatisticsAsFromTheKeys) {
  // fp32 scoring, so that the keys path and the statistics computed in double differ only by
  // rounding; the window of every policy set to the captured one.
  const test::SyntheticPrefill prefill(3, 8, 2, 400, 32, 16, 7);
  const nlohmann::json fp32_window = {{"precision", "fp32"}, {"window", 16}};
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"snapkv", fp32_window},
      {"pyramidkv", fp32_window},
      {"adakv", fp32_window},
      {"dropkv", fp32_window},
      {"adadropkv", fp32_window},
      {"knorm", nlohmann::json::object()},
      {"streamingllm", nlohmann::json::object()},
      {"criticalkv", fp32_window},
      {"criticaladakv", fp32_window},
  };
  for (const auto& [policy, params] : cases) {
    SCOPED_TRACE(policy);
    CachePlan plan = make_cache_plan(policy, params, Budget::parse("25%"));
    const CaptureRequest request = plan.prefill->capture();
    EXPECT_FALSE(request.host_keys_values);
    std::vector<LayerStatistics> owned;
    const PrefillView statistics_only = statistics_view(prefill, owned, request);
    ASSERT_FALSE(statistics_only.layers[0].has_keys_values());
    const KeptIndices from_keys = plan.prefill->select(prefill.view, 100);
    const KeptIndices from_statistics = plan.prefill->select(statistics_only, 100);
    EXPECT_GE(mean_jaccard(from_keys, from_statistics), 0.995);
  }
}

TEST(DeviceStatistics, PoliciesThatReadTheKeysSayWhatTheyRead) {
  for (const std::string policy : {"keydiff", "cake", "andpro", "tova"}) {
    SCOPED_TRACE(policy);
    const CachePlan plan = make_cache_plan(policy, nlohmann::json::object(), Budget::parse("25%"));
    EXPECT_TRUE(plan.prefill->capture().host_keys_values);
  }
  for (const std::string policy : {"criticalkv", "criticaladakv"}) {  // ‖v W_o‖ as a statistic
    SCOPED_TRACE(policy);
    const CachePlan plan = make_cache_plan(policy, nlohmann::json::object(), Budget::parse("25%"));
    EXPECT_TRUE(plan.prefill->capture().projected_value_norms);
    EXPECT_FALSE(plan.prefill->capture().host_keys_values);
  }
  const CachePlan snapkv =
      make_cache_plan("snapkv", nlohmann::json::object(), Budget::parse("25%"));
  // The default bf16 precision asks for the sums with the reference's casts; fp32 for plain ones.
  EXPECT_EQ(snapkv.prefill->capture().window_attention_sums,
            (std::vector<WindowSumsRequest>{{32, true}}));
  const CachePlan snapkv_fp32 =
      make_cache_plan("snapkv", {{"precision", "fp32"}}, Budget::parse("25%"));
  EXPECT_EQ(snapkv_fp32.prefill->capture().window_attention_sums,
            (std::vector<WindowSumsRequest>{{32, false}}));
  const CachePlan dropkv =
      make_cache_plan("dropkv", nlohmann::json::object(), Budget::parse("25%"));
  ASSERT_EQ(dropkv.prefill->capture().output_perturbations.size(), 1u);
  EXPECT_EQ(dropkv.prefill->capture().output_perturbations[0].window, 8);
  EXPECT_TRUE(dropkv.prefill->capture().output_perturbations[0].round_p_to_bf16);
}

TEST(DeviceStatistics, AViewWithNeitherStatisticsNorKeysIsALogicError) {
  const test::SyntheticPrefill prefill(1, 4, 2, 64, 16, 8, 3);
  PrefillView bare = prefill.view;
  for (auto& layer : bare.layers) {
    layer.keys.clear();
    layer.values.clear();
  }
  for (const std::string policy : {"snapkv", "dropkv", "knorm"}) {
    SCOPED_TRACE(policy);
    const CachePlan plan = make_cache_plan(policy, {{"window", 8}}, Budget::parse("50%"));
    EXPECT_THROW(plan.prefill->select(bare, 32), std::logic_error);
  }
}

TEST(DeviceStatistics, RequestsMergeIntoSortedUniqueLists) {
  CaptureRequest a, b;
  a.window_attention_sums = {{32, true}};
  a.output_perturbations = {{8, true}};
  b.window_attention_sums = {{8, true}, {32, false}, {32, true}};
  b.output_perturbations = {{8, true}, {8, false}};
  b.key_norms = true;
  a.merge(b);
  EXPECT_EQ(a.window_attention_sums,
            (std::vector<WindowSumsRequest>{{8, true}, {32, false}, {32, true}}));
  EXPECT_EQ(a.output_perturbations, (std::vector<PerturbationRequest>{{8, false}, {8, true}}));
  EXPECT_TRUE(a.key_norms);
  EXPECT_FALSE(a.host_keys_values);
}

}  // namespace
}  // namespace kvb
