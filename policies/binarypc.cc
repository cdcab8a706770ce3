// BinaryPC (seed 001; docs/methods.md §12) — kind D, binary principal-component hashing.
//
// Prefill (per non-dense layer and KV head): a projection P [64, d] — fitted online on the prompt's
// keys (Algorithm 1, 4 iterations per bit) or loaded from `kvbench calibrate` (OPC) — and a 64-bit
// code per prompt key (Algorithm 2, sign(0) = +1). The error-aware safeguard (EAS) marks the
// err_k = min(max(int(err_ratio * k), 1), L) keys with the largest reconstruction error
// ||k - sum_i h_i P[i]||, always kept.
// Decode step (per KV head): project and quantise the group's queries (one scale per group, sign +
// 7 magnitude bit-planes), score every prompt key by XOR/AND/popcount (the exact integer dot
// product), take the max over the group, and keep the top k prompt keys (S_err forced inside k)
// plus every decode token; exact softmax over them, shared by the whole group (GQA "shared").
// Budget: k = the token budget, capped at L; decode tokens come on top. No sinks or local window.
// Dense layers {0, 1} (fix_layers of the shipped configs).
// Precision: the official PyTorch path runs in bf16; this one in f32 (ties are rarer here).
// Source: yudaohai666/BPC bpc/bpc/bpc_pytorch.py, bpc/bpc/bpc.py, calibrate_projection.py.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <limits>

#include "common/errors.h"
#include "kernels/cpu/binary_hash.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/topk_select.h"
#include "policies/decode_selector_common.h"
#include "policies/decode_selectors.h"
#include "policies/methods.h"
#include "policies/selection.h"

namespace kvb {

using kernels::kBinaryHashBits;
using kernels::QuantizedQuery;
namespace {

nlohmann::json binarypc_defaults() {
  return {{"bits", 64},       {"eas", true},     {"err_ratio", 0.1}, {"dense_layers", {0, 1}},
          {"projection", ""}, {"iterations", 4}, {"seed", 0}};
}

// `kvbench select` may give the OPC projection as this tensor of its inputs instead of the file of
// the "projection" parameter.
const TensorInput kProjectionTensor{"bpc_projection", "projection", "[layers, Hkv, 64, d]"};

std::shared_ptr<const BinaryProjectionSet> projection_of(const GivenTensor& given) {
  const std::vector<int64_t>& shape = given.shape;
  if (shape.size() != 4 || shape[0] <= 0 || shape[1] <= 0 || shape[2] != kBinaryHashBits ||
      shape[3] <= 0)
    throw InputError("binarypc: tensor '" + kProjectionTensor.tensor + "' must have shape " +
                     kProjectionTensor.shape);
  auto projection = std::make_shared<BinaryProjectionSet>(
      static_cast<int>(shape[0]), static_cast<int>(shape[1]), static_cast<int>(shape[3]));
  if (given.values.size() != projection->rows.size())
    throw InputError("binarypc: tensor '" + kProjectionTensor.tensor + "' holds " +
                     std::to_string(given.values.size()) + " values for its shape's " +
                     std::to_string(projection->rows.size()));
  std::copy(given.values.begin(), given.values.end(), projection->rows.begin());
  return projection;
}

struct HashedKvHead {
  int prompt_length = 0;
  std::vector<float> projection;       // [64, d]
  std::vector<uint64_t> codes;         // [prompt_length]
  std::vector<int32_t> protected_ids;  // S_err
};

class BinaryPcSelector : public ParamDecodeSelector {
 public:
  BinaryPcSelector(const nlohmann::json& params, const Budget& budget,
                   std::shared_ptr<const BinaryProjectionSet> projection, PlanFiles* files)
      : ParamDecodeSelector("binarypc", params, binarypc_defaults(), budget),
        projection_(std::move(projection)) {
    const int bits = params_.integer("bits");
    if (bits != kBinaryHashBits)
      throw InputError("parameter 'bits' of policy 'binarypc' is " + std::to_string(bits) +
                       "; only 64 is supported (one 64-bit code word per token and KV head)");
    eas_ = params_.boolean("eas");
    err_ratio_ = number_at_least(params_, "err_ratio", 0.0);
    if (err_ratio_ > 1)
      throw InputError("parameter 'err_ratio' of policy 'binarypc' must be in [0, 1]");
    fit_.iterations = integer_at_least(params_, "iterations", 0);
    fit_.seed = static_cast<uint64_t>(integer_at_least(params_, "seed", 0));
    projection_path_ = params_.text("projection");
    if (projection_) return;
    if (const GivenTensor* given = files ? files->given_tensor(kProjectionTensor.tensor) : nullptr)
      projection_ = projection_of(*given);
    else if (projection_path_.empty())
      return;
    else if (files)
      projection_ = files->binarypc_projection(projection_path_);
    else
      projection_ =
          std::make_shared<BinaryProjectionSet>(BinaryProjectionSet::load(projection_path_));
  }

  nlohmann::json describe() const override {
    nlohmann::json described = ParamDecodeSelector::describe();
    if (projection_ && projection_path_.empty()) described["projection"] = "(given tensor)";
    described["projection_fit"] = projection_ ? "offline (OPC)" : "online";
    described["gqa"] = "shared";
    return described;
  }

  void start(const KvStore& store, int, int budget_tokens) override {
    if (projection_ && (projection_->n_layers != store.n_layers() ||
                        projection_->n_kv_heads != store.n_kv_heads() ||
                        projection_->head_dim != store.head_dim()))
      throw InputError("binarypc: the projection is for " + std::to_string(projection_->n_layers) +
                       " layers x " + std::to_string(projection_->n_kv_heads) +
                       " KV heads x d=" + std::to_string(projection_->head_dim) +
                       " but the model has " + std::to_string(store.n_layers()) + " x " +
                       std::to_string(store.n_kv_heads()) + " x " +
                       std::to_string(store.head_dim()) + " (calibrate it with this model)");
    budget_tokens_ = budget_tokens;
    heads_.assign(store.n_layers(), std::vector<HashedKvHead>(store.n_kv_heads()));
    const std::vector<std::pair<int, int>> hashed =
        hashed_heads(store.n_layers(), store.n_kv_heads());
    // Heads are independent: one task each.
    tbb::parallel_for(size_t{0}, hashed.size(), [&](size_t i) {
      const auto [layer, h] = hashed[i];
      heads_[layer][h] = hash_head(store, layer, h);
    });
  }

  void on_append(const KvStore&, int) override {}  // decode tokens are never hashed

  bool runs_on_device() const override { return true; }
  // The device hashes with the same rows as start(): the OPC file's, or fitted there to the
  // prompt's keys from the start vectors start() draws (the same bits: binary_fit_projection).
  std::optional<DeviceSelectionSpec> device_selection(const ModelConfig& model,
                                                      int budget_tokens) const override {
    DeviceSelectionSpec spec =
        device_selection_of(DeviceSelectionSpec::Scores::kSignCodes, budget_tokens, dense_layers_);
    spec.shared_group = true;
    spec.sign_codes.force_worst_reconstructed = eas_;
    spec.sign_codes.forced_error_ratio = err_ratio_;
    if (projection_) {
      spec.sign_codes.projection = projection_->rows;
      return spec;
    }
    const int n_layers = model.n_layers, n_kv_heads = model.n_kv_heads, d = model.head_dim;
    const size_t rows = static_cast<size_t>(kBinaryHashBits) * d;
    DeviceSelectionSpec::SignCodes::Fit& fit = spec.sign_codes.fit;
    fit.iterations = fit_.iterations;
    fit.recompute_signs = fit_.recompute_signs;
    fit.starts.assign(rows * n_layers * n_kv_heads, 0.0f);
    for (const auto& [layer, h] : hashed_heads(n_layers, n_kv_heads)) {
      const std::vector<float> starts = kernels::binary_fit_starts(head_fit(layer, h).seed, d);
      std::copy(starts.begin(), starts.end(),
                fit.starts.begin() + (static_cast<size_t>(layer) * n_kv_heads + h) * rows);
    }
    return spec;
  }

  void select(int layer, const float* query, const KvStore& store, Selection& out) override {
    const int group = begin_selection(layer, store, out);
    if (group == 0) return;  // a dense layer
    const int d = store.head_dim();
    std::vector<QuantizedQuery> quantized(group);
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const HashedKvHead& head = heads_[layer][h];
      kernels::binary_pack_queries(head.projection.data(), d,
                                   query + static_cast<int64_t>(h) * group * d, group,
                                   quantized.data());
      std::vector<int> scores(head.prompt_length);
      kernels::binary_score_keys(quantized.data(), group, head.codes.data(), head.prompt_length,
                                 scores.data());
      std::vector<float> ranking(scores.begin(), scores.end());
      for (int32_t j : head.protected_ids) ranking[j] = std::numeric_limits<float>::infinity();
      const int k = std::min(budget_tokens_, head.prompt_length);
      std::vector<int32_t> kept = kernels::topk_select(ranking.data(), head.prompt_length, k);
      for (int j = head.prompt_length; j < store.length(layer, h); ++j) kept.push_back(j);
      for (int g = 0; g < group; ++g) out.indices[h * group + g] = kept;
    }
  }

 private:
  // The (layer, KV head) pairs outside the dense layers: those that are hashed.
  std::vector<std::pair<int, int>> hashed_heads(int n_layers, int n_kv_heads) const {
    std::vector<std::pair<int, int>> heads;
    for (int layer = 0; layer < n_layers; ++layer) {
      if (is_dense_layer(dense_layers_, layer)) continue;
      for (int h = 0; h < n_kv_heads; ++h) heads.emplace_back(layer, h);
    }
    return heads;
  }

  // Each (layer, KV head) fits with a seed of its own.
  BinaryProjectionFit head_fit(int layer, int h) const {
    BinaryProjectionFit fit = fit_;
    fit.seed = fit_.seed * 1000003u + static_cast<uint64_t>(layer) * 131u + h;
    return fit;
  }

  HashedKvHead hash_head(const KvStore& store, int layer, int h) const {
    const int d = store.head_dim();
    HashedKvHead head;
    head.prompt_length = store.length(layer, h);
    const float* keys = store.keys(layer, h);
    head.projection.resize(static_cast<size_t>(kBinaryHashBits) * d);
    if (projection_) {
      const float* rows = projection_->head(layer, h);
      std::copy(rows, rows + head.projection.size(), head.projection.begin());
    } else if (head.prompt_length > 0) {
      fit_binary_projection(keys, head.prompt_length, d, head_fit(layer, h),
                            head.projection.data());
    }
    head.codes.resize(head.prompt_length);
    kernels::binary_hash_keys(head.projection.data(), d, keys, head.prompt_length,
                              head.codes.data());
    if (!eas_ || head.prompt_length == 0) return head;
    const int k = std::min(budget_tokens_, head.prompt_length);
    const int err_k = std::min(std::max(static_cast<int>(err_ratio_ * k), 1), head.prompt_length);
    std::vector<float> errors(head.prompt_length);
    for (int j = 0; j < head.prompt_length; ++j)
      errors[j] = kernels::binary_hash_reconstruction_error(
          head.projection.data(), d, keys + static_cast<int64_t>(j) * d, head.codes[j]);
    head.protected_ids = kernels::topk_select(errors.data(), head.prompt_length, err_k);
    return head;
  }

  std::shared_ptr<const BinaryProjectionSet> projection_;
  std::string projection_path_;
  BinaryProjectionFit fit_;
  bool eas_ = true;
  double err_ratio_ = 0.1;
  int budget_tokens_ = 0;
  std::vector<std::vector<HashedKvHead>> heads_;  // [layer][kv head]
};

}  // namespace

std::shared_ptr<DescribedDecodeSelector> make_binarypc_selector(
    const nlohmann::json& params, const Budget& budget,
    std::shared_ptr<const BinaryProjectionSet> projection, PlanFiles* files) {
  return std::make_shared<BinaryPcSelector>(params, budget, std::move(projection), files);
}

PolicyFactory binarypc_factory() {
  PolicyFactory factory = decode_selector_factory(
      {"binarypc", "64-bit binary principal-component key codes, bit-plane popcount top-k, EAS",
       "yudaohai666/BPC @544b6d2 bpc/bpc/bpc_pytorch.py, bpc/bpc/bpc.py"},
      binarypc_defaults(),
      [](const nlohmann::json& params, const Budget& budget, PlanFiles& files) {
        return make_binarypc_selector(params, budget, nullptr, &files);
      });
  factory.tensor_inputs = {kProjectionTensor};
  return factory;
}

}  // namespace kvb
