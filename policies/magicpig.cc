// MagicPIG (Chen et al. 2025; docs/methods.md §11) — kind D, LSH sampling with importance weights.
//
// After prefill, per non-dense layer and KV head: sinks S = [0, 4), local W = the last 64 prompt
// entries, middle M = the rest. Keys are centred on the middle mean mu (softmax-invariant: q.mu is
// the same for every key). Each middle key gets K*L random-projection sign bits (one Gaussian
// matrix per KV head, shared by groups of 16 layers), split into L tables of K bits.
// Per decode step and query head: the middle tokens whose code matches the query's in at least
// `threshold` (2) tables are sampled with probability
//   u = 1 - (1 - p^K)^L - L p^K (1 - p^K)^(L-1),  p = 1 - arccos(cos(q, k~)) / pi
// and enter the softmax with logit q.k/sqrt(d) - log(u + 1e-4) (self-normalised importance
// sampling); S, W and every decode token are attended exactly. cos is clamped to [-1, 1].
// Defaults (K, L) = (10, 150), dense layers {0, 16}. The budget does not apply: the number of
// samples is data-dependent (the expected count is sum_j u_j). K = 0 samples every middle token
// with u = 1 (a sanity mode: the output then equals full attention up to the 1e-4 offset).
// Source: Infini-AI-Lab/MagicPIG evaluations/RULER/pred/cache_ref.py, models/attnserver.py.
#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <random>

#include "common/errors.h"
#include "policies/decode_selector_common.h"
#include "policies/decode_selectors.h"
#include "policies/methods.h"
#include "policies/selection.h"

namespace kvb {
namespace {

nlohmann::json magicpig_defaults() {
  return {{"K", 10},     {"L", 150},  {"threshold", 2},         {"sinks", 4},
          {"local", 64}, {"seed", 0}, {"dense_layers", {0, 16}}};
}

struct HashedHead {
  int middle_begin = 0;
  int middle_end = 0;               // exclusive; entries >= middle_end are attended exactly
  std::vector<float> mean;          // mu
  std::vector<float> centred_norm;  // ||k_j - mu|| for middle entries
  std::vector<uint32_t> codes;      // [n_middle, L]
};

class MagicPigSelector : public ParamDecodeSelector {
 public:
  MagicPigSelector(const nlohmann::json& params, const Budget& budget)
      : ParamDecodeSelector("magicpig", params, magicpig_defaults(), budget) {
    bits_per_table_ = integer_at_least(params_, "K", 0);
    if (bits_per_table_ > 32)
      throw InputError("parameter 'K' of policy 'magicpig' must be <= 32 bits per table");
    tables_ = integer_at_least(params_, "L", 1);
    threshold_ = integer_at_least(params_, "threshold", 1);
    if (threshold_ > tables_)
      throw InputError("parameter 'threshold' of policy 'magicpig' (" + std::to_string(threshold_) +
                       ") cannot exceed the table count 'L' (" + std::to_string(tables_) + ")");
    sinks_ = integer_at_least(params_, "sinks", 0);
    local_ = integer_at_least(params_, "local", 0);
    seed_ = static_cast<uint64_t>(integer_at_least(params_, "seed", 0));
  }

  nlohmann::json describe() const override {
    nlohmann::json described = params_.resolved();
    described["gqa"] = "per_head";
    described["budget"] = "data-dependent";
    return described;
  }

  void start(const KvStore& store, int, int) override {
    heads_.assign(store.n_layers(), std::vector<HashedHead>(store.n_kv_heads()));
    for (int layer = 0; layer < store.n_layers(); ++layer) {
      if (is_dense_layer(dense_layers_, layer)) continue;
      for (int h = 0; h < store.n_kv_heads(); ++h) heads_[layer][h] = hash_head(store, layer, h);
    }
  }

  void on_append(const KvStore&, int) override {}  // decode tokens are never hashed

  void select(int layer, const float* query, const KvStore& store, Selection& out) override {
    const int group = begin_selection(layer, store, out);
    const int n_query_heads = static_cast<int>(out.indices.size());
    // One list of importance weights per query head (empty ones on a dense layer).
    out.logit_bias.assign(n_query_heads, {});
    if (group == 0) return;
    for (int a = 0; a < n_query_heads; ++a)
      select_head(layer, a / group, query + static_cast<int64_t>(a) * store.head_dim(), store,
                  out.indices[a], out.logit_bias[a]);
  }

 private:
  const std::vector<float>& projection(int layer, int kv_head, int d) {
    const std::pair<int, int> key{layer / 16, kv_head};
    auto found = projections_.find(key);
    if (found != projections_.end()) return found->second;
    std::mt19937_64 generator(seed_ * 1000003u + static_cast<uint64_t>(key.first) * 7919u +
                              kv_head);
    std::normal_distribution<float> gaussian(0.0f, 1.0f);
    std::vector<float> matrix(static_cast<size_t>(bits_per_table_) * tables_ * d);  // [K*L, d]
    for (float& x : matrix) x = gaussian(generator);
    return projections_.emplace(key, std::move(matrix)).first->second;
  }

  // Table codes of a vector x (centred key or query) against the head's projection.
  void table_codes(const std::vector<float>& matrix, const float* x, int d, uint32_t* codes) const {
    for (int l = 0; l < tables_; ++l) {
      uint32_t code = 0;
      for (int i = 0; i < bits_per_table_; ++i) {
        const float* column = matrix.data() + (static_cast<int64_t>(l) * bits_per_table_ + i) * d;
        float dot = 0;
        for (int t = 0; t < d; ++t) dot += x[t] * column[t];
        if (dot > 0) code |= uint32_t{1} << i;
      }
      codes[l] = code;
    }
  }

  HashedHead hash_head(const KvStore& store, int layer, int h) {
    const int d = store.head_dim();
    const int length = store.length(layer, h);
    HashedHead head;
    head.middle_begin = std::min(sinks_, length);
    head.middle_end = std::max(head.middle_begin, length - local_);
    head.mean.assign(d, 0.0f);
    const int n_middle = head.middle_end - head.middle_begin;
    if (n_middle == 0) return head;
    const float* keys = store.keys(layer, h);
    for (int j = head.middle_begin; j < head.middle_end; ++j)
      for (int t = 0; t < d; ++t) head.mean[t] += keys[static_cast<int64_t>(j) * d + t] / n_middle;
    const std::vector<float>& matrix = projection(layer, h, d);
    head.codes.resize(static_cast<size_t>(n_middle) * tables_);
    head.centred_norm.resize(n_middle);
    std::vector<float> centred(d);
    for (int m = 0; m < n_middle; ++m) {
      const float* k = keys + static_cast<int64_t>(head.middle_begin + m) * d;
      double sq = 0;
      for (int t = 0; t < d; ++t) {
        centred[t] = k[t] - head.mean[t];
        sq += static_cast<double>(centred[t]) * centred[t];
      }
      head.centred_norm[m] = static_cast<float>(std::sqrt(sq));
      table_codes(matrix, centred.data(), d, head.codes.data() + static_cast<int64_t>(m) * tables_);
    }
    return head;
  }

  // Probability that a token at angle-similarity p collides in at least `threshold` of L tables;
  // the reference's formula is written for the threshold 2 (at least two collisions).
  double sampling_probability(double p) const {
    const double per_table = std::pow(p, bits_per_table_);
    double miss_all = std::pow(1.0 - per_table, tables_);
    if (threshold_ == 1) return 1.0 - miss_all;
    // P(at least t) = 1 - sum_{c < t} C(L, c) q^c (1 - q)^(L - c)
    double below = 0;
    double binomial = 1;
    for (int c = 0; c < threshold_; ++c) {
      below += binomial * std::pow(per_table, c) * std::pow(1.0 - per_table, tables_ - c);
      binomial = binomial * (tables_ - c) / (c + 1);
    }
    return std::clamp(1.0 - below, 0.0, 1.0);
  }

  void select_head(int layer, int h, const float* q, const KvStore& store,
                   std::vector<int32_t>& indices, std::vector<float>& bias) {
    const HashedHead& head = heads_[layer][h];
    const int d = store.head_dim();
    const int length = store.length(layer, h);
    indices.clear();
    bias.clear();
    for (int j = 0; j < head.middle_begin; ++j) indices.push_back(j);
    bias.assign(indices.size(), 0.0f);
    const int n_middle = head.middle_end - head.middle_begin;
    if (n_middle > 0) {
      const std::vector<float>& matrix = projection(layer, h, d);
      std::vector<uint32_t> query_codes(tables_);
      table_codes(matrix, q, d, query_codes.data());
      double q_norm = 0;
      double q_dot_mean = 0;
      for (int t = 0; t < d; ++t) {
        q_norm += static_cast<double>(q[t]) * q[t];
        q_dot_mean += static_cast<double>(q[t]) * head.mean[t];
      }
      q_norm = std::sqrt(q_norm);
      const float* keys = store.keys(layer, h);
      for (int m = 0; m < n_middle; ++m) {
        const uint32_t* codes = head.codes.data() + static_cast<int64_t>(m) * tables_;
        int collisions = 0;
        for (int l = 0; l < tables_ && collisions < threshold_; ++l)
          collisions += codes[l] == query_codes[l];
        if (collisions < threshold_) continue;
        const int j = head.middle_begin + m;
        double dot = -q_dot_mean;
        for (int t = 0; t < d; ++t)
          dot += static_cast<double>(q[t]) * keys[static_cast<int64_t>(j) * d + t];
        const double denominator = q_norm * head.centred_norm[m];
        const double cosine = denominator > 0 ? std::clamp(dot / denominator, -1.0, 1.0) : 0.0;
        const double p = 1.0 - std::acos(cosine) / std::numbers::pi;
        indices.push_back(j);
        bias.push_back(static_cast<float>(-std::log(sampling_probability(p) + 1e-4)));
      }
    }
    for (int j = head.middle_end; j < length; ++j) {
      indices.push_back(j);
      bias.push_back(0.0f);
    }
  }

  int bits_per_table_ = 10;
  int tables_ = 150;
  int threshold_ = 2;
  int sinks_ = 4;
  int local_ = 64;
  uint64_t seed_ = 0;
  std::vector<std::vector<HashedHead>> heads_;  // [layer][kv head]
  std::map<std::pair<int, int>, std::vector<float>> projections_;
};

}  // namespace

std::shared_ptr<DescribedDecodeSelector> make_magicpig_selector(const nlohmann::json& params,
                                                                const Budget& budget) {
  return std::make_shared<MagicPigSelector>(params, budget);
}

PolicyFactory magicpig_factory() {
  return decode_selector_factory(
      {"magicpig", "LSH sampling (K bits x L tables) with importance-weighted logits",
       "Infini-AI-Lab/MagicPIG @ac9aa36 evaluations/RULER/pred/cache_ref.py"},
      magicpig_defaults(), make_magicpig_selector);
}

}  // namespace kvb
