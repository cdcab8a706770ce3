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
// Defaults (K, L) = (10, 150), dense layers {0, 16}; K <= 16 (16-bit codes). The budget does not
// apply: the number of samples is data-dependent (the expected count is sum_j u_j). K = 0 samples
// every middle token with u = 1 (a sanity mode: the output then equals full attention up to the
// 1e-4 offset). Hashing, collisions and weights are kernels/cpu/lsh_sampling.h; the CUDA engine
// runs the same steps as its generic LSH sampling (engine/device_selection.h) with the same
// Gaussian rows, so both engines sample the same entries.
// Source: Infini-AI-Lab/MagicPIG evaluations/RULER/pred/cache_ref.py, models/attnserver.py.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <tuple>

#include "common/errors.h"
#include "kernels/cpu/lsh_sampling.h"
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
  std::vector<uint16_t> codes;      // [L, n_middle] (table-major, kernels/cpu/lsh_sampling.h)
};

// The Gaussian rows [K * L, d] of KV head `kv_head` for the group of 16 layers that holds `layer`,
// one generator per (seed, group, head); drawn once per head dimension and shared by the CPU
// selection and the device's.
class ProjectionRows {
 public:
  ProjectionRows(uint64_t seed, int rows) : seed_(seed), rows_(rows) {}

  std::shared_ptr<const std::vector<float>> of(int layer, int kv_head, int d) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::tuple<int, int, int> key{layer / 16, kv_head, d};
    auto found = drawn_.find(key);
    if (found != drawn_.end()) return found->second;
    std::mt19937_64 generator(seed_ * 1000003u + static_cast<uint64_t>(layer / 16) * 7919u +
                              kv_head);
    std::normal_distribution<float> gaussian(0.0f, 1.0f);
    auto matrix = std::make_shared<std::vector<float>>(static_cast<size_t>(rows_) * d);
    for (float& x : *matrix) x = gaussian(generator);
    return drawn_.emplace(key, std::move(matrix)).first->second;
  }

 private:
  const uint64_t seed_;
  const int rows_;
  std::mutex mutex_;
  std::map<std::tuple<int, int, int>, std::shared_ptr<const std::vector<float>>> drawn_;
};

class MagicPigSelector : public ParamDecodeSelector {
 public:
  MagicPigSelector(const nlohmann::json& params, const Budget& budget)
      : ParamDecodeSelector("magicpig", params, magicpig_defaults(), budget) {
    bits_per_table_ = integer_at_least(params_, "K", 0);
    if (bits_per_table_ > kernels::kLshMaxBitsPerTable)
      throw InputError("parameter 'K' of policy 'magicpig' must be <= " +
                       std::to_string(kernels::kLshMaxBitsPerTable) +
                       " bits per table (codes are 16-bit); got " +
                       std::to_string(bits_per_table_));
    tables_ = integer_at_least(params_, "L", 1);
    threshold_ = integer_at_least(params_, "threshold", 1);
    if (threshold_ > tables_)
      throw InputError("parameter 'threshold' of policy 'magicpig' (" + std::to_string(threshold_) +
                       ") cannot exceed the table count 'L' (" + std::to_string(tables_) + ")");
    sinks_ = integer_at_least(params_, "sinks", 0);
    local_ = integer_at_least(params_, "local", 0);
    projections_ = std::make_shared<ProjectionRows>(
        static_cast<uint64_t>(integer_at_least(params_, "seed", 0)), bits_per_table_ * tables_);
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
    for (int h = 0; h < store.n_kv_heads(); ++h)
      select_group(layer, h, group, query + static_cast<int64_t>(h) * group * store.head_dim(),
                   store, out.indices.data() + h * group, out.logit_bias.data() + h * group);
  }

  // The device samples with the same rows, exact set and probabilities (the engine's LSH
  // sampling, engine/device_selection.h), so both engines attend to the same entries.
  bool runs_on_device() const override { return true; }
  std::optional<DeviceSelectionSpec> device_selection(const ModelConfig&,
                                                      int budget_tokens) const override {
    DeviceSelectionSpec spec = device_selection_of(DeviceSelectionSpec::Scores::kLshSampling,
                                                   budget_tokens, dense_layers_);
    DeviceSelectionSpec::LshSampling& lsh = spec.lsh_sampling;
    lsh.bits_per_table = bits_per_table_;
    lsh.tables = tables_;
    lsh.min_collisions = threshold_;
    lsh.exact_first = sinks_;
    lsh.exact_last = local_;
    lsh.projection = [rows = projections_](int layer, int kv_head, int d) {
      return rows->of(layer, kv_head, d);
    };
    return spec;
  }

 private:
  kernels::LshTables tables_of(int layer, int h, int d) const {
    return {projections_->of(layer, h, d)->data(), bits_per_table_, tables_, d};
  }

  HashedHead hash_head(const KvStore& store, int layer, int h) const {
    const int d = store.head_dim();
    const int length = store.length(layer, h);
    HashedHead head;
    head.middle_begin = std::min(sinks_, length);
    head.middle_end = std::max(head.middle_begin, length - local_);
    const int n_middle = head.middle_end - head.middle_begin;
    const float* keys = store.keys(layer, h);
    head.mean = kernels::lsh_key_mean(keys, head.middle_begin, head.middle_end, d);
    head.codes.resize(static_cast<size_t>(n_middle) * tables_);
    head.centred_norm.resize(n_middle);
    kernels::lsh_hash_keys(tables_of(layer, h, d), keys, head.middle_begin, head.middle_end,
                           head.mean.data(), head.codes.data(), n_middle, head.centred_norm.data());
    return head;
  }

  // The lists of KV head h's `group` query heads (queries [group, d]).
  void select_group(int layer, int h, int group, const float* queries, const KvStore& store,
                    std::vector<int32_t>* indices, std::vector<float>* bias) const {
    const HashedHead& head = heads_[layer][h];
    const int d = store.head_dim();
    kernels::LshSampleArgs args;
    args.tables = tables_of(layer, h, d);
    std::vector<uint16_t> query_codes(static_cast<size_t>(group) * tables_);
    kernels::lsh_hash_queries(args.tables, queries, group, query_codes.data());
    args.min_collisions = threshold_;
    args.keys = store.keys(layer, h);
    args.middle_begin = head.middle_begin;
    args.middle_end = head.middle_end;
    args.length = store.length(layer, h);
    args.mean = head.mean.data();
    args.key_codes = head.codes.data();
    args.code_table_stride = head.middle_end - head.middle_begin;
    args.centred_norms = head.centred_norm.data();
    args.queries = queries;
    args.query_codes = query_codes.data();
    args.n_queries = group;
    kernels::lsh_sample_lists(args, indices, bias);
  }

  int bits_per_table_ = 10;
  int tables_ = 150;
  int threshold_ = 2;
  int sinks_ = 4;
  int local_ = 64;
  std::vector<std::vector<HashedHead>> heads_;  // [layer][kv head]
  std::shared_ptr<ProjectionRows> projections_;
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
