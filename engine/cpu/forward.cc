#include "engine/cpu/forward.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "engine/cpu/early_exit_walk.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/early_exit_decode.h"
#include "kernels/cpu/kv_rows.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/rmsnorm.h"

namespace kvb {
namespace {

const float* bias_or_null(const std::vector<float>& bias) {
  return bias.empty() ? nullptr : bias.data();
}

int max_head_length(const KvStore& store) {
  int longest = 0;
  for (int l = 0; l < store.n_layers(); ++l)
    for (int h = 0; h < store.n_kv_heads(); ++h) longest = std::max(longest, store.length(l, h));
  return longest;
}

// y[rows, out] = x[rows, in] · W^T (+ bias), on W as stored: a matrix-vector product for one row
// (decode), a GEMM for a chunk (prefill).
void project(const WeightMatrix& w, int64_t out, int64_t in, const float* x, int rows,
             const float* bias, float* y) {
  const kernels::WeightView view = w.view(out, in);
  if (rows == 1) {
    kernels::matvec(view, x, bias, y);
  } else {
    kernels::matmul(x, rows, view, bias, y);
  }
}

// Decode: several products of one row in one parallel loop (kernels::matvec over targets).
struct Projection {
  const WeightMatrix* w;
  int64_t out;
  const float* bias;
  float* y;
};
void project_one_row(std::initializer_list<Projection> projections, int64_t in, const float* x) {
  std::vector<kernels::MatvecTarget> targets;
  for (const Projection& p : projections) targets.push_back({p.w->view(p.out, in), p.bias, p.y});
  kernels::matvec(targets, x);
}

void add_in_place(std::vector<float>& x, const std::vector<float>& delta) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
}

// One early-exit walk, plus its oracle trace in oracle mode.
void walk_early_exit(int layer, int head, const kernels::EarlyExitDecodeArgs& args,
                     const EarlyExitParams& params, kernels::EarlyExitWalkStats& stats,
                     kernels::EarlyExitOracleSummary& oracle) {
  if (params.observer) params.observer(layer, head, args);
  const kernels::EarlyExitOptions options = early_exit_options(params);
  kernels::early_exit_decode(args, options, &stats);
  if (params.oracle_tolerance > 0)
    oracle.add(kernels::early_exit_oracle_trace(args, options, params.oracle_tolerance),
               params.oracle_tolerance);
}

// A 16-bit cache's rows of one layer widened to f32 for the prefill's sgemms: one layer at a
// time, so the scratch is [Hkv, length, head_dim] twice, whatever the model's depth.
struct KvRowScratch {
  std::vector<std::vector<float>> keys, values;
};

void rows_for_attention(const KvStore& store, int layer, KvRowScratch& scratch,
                        kernels::PrefillAttentionArgs& attention) {
  const int n_heads = store.n_kv_heads(), d = store.head_dim();
  const int64_t chunk = attention.n_queries;
  if (!store.holds_f32()) {
    scratch.keys.resize(n_heads);
    scratch.values.resize(n_heads);
  }
  for (int h = 0; h < n_heads; ++h) {
    const int64_t n = store.length(layer, h);
    attention.prefix.push_back(static_cast<int>(n - chunk));
    if (store.holds_f32()) {
      attention.keys.push_back(store.keys(layer, h));
      attention.values.push_back(store.values(layer, h));
      continue;
    }
    scratch.keys[h].resize(n * d);
    scratch.values[h].resize(n * d);
    kernels::decode_kv_rows(store.row_type(), store.key_rows(layer, h), scratch.keys[h].data(),
                            n * d);
    kernels::decode_kv_rows(store.row_type(), store.value_rows(layer, h), scratch.values[h].data(),
                            n * d);
    attention.keys.push_back(scratch.keys[h].data());
    attention.values.push_back(scratch.values[h].data());
  }
}

}  // namespace

int next_position(const KvStore& store) {
  int next = 0;
  for (int l = 0; l < store.n_layers(); ++l)
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const int n = store.length(l, h);
      // Positions are increasing within a head, so the last entry is the largest.
      if (n > 0) next = std::max(next, store.positions(l, h)[n - 1] + 1);
    }
  return next;
}

CpuEngine::CpuEngine(const ModelWeights& weights, KvDtype kv_dtype, ForwardPrecision precision)
    : precision_(precision),
      rounded_weights_(precision == ForwardPrecision::kBf16Device
                           ? std::make_unique<const ModelWeights>(weights_rounded_to_bf16(weights))
                           : nullptr),
      weights_(rounded_weights_ ? *rounded_weights_ : weights),
      kv_dtype_(kv_dtype) {
  if (precision == ForwardPrecision::kBf16Device && kv_dtype == KvDtype::kF16)
    throw InputError(
        "the CPU engine's bf16 device numerics store bf16 keys and values, which an f16 cache "
        "would round again; give a bf16 (or f32) KV cache");
  const ModelConfig& c = weights.config;
  if (c.llama3_rope_scaling) {
    const auto& s = *c.llama3_rope_scaling;
    inv_freq_ = kernels::rope_inverse_frequencies_llama3(
        c.head_dim, c.rope_theta,
        {s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_position});
  } else {
    inv_freq_ = kernels::rope_inverse_frequencies(c.head_dim, c.rope_theta);
  }
  rope_pairing_ = c.rope_interleaved_pairs ? kernels::RopePairing::kInterleavedPairs
                                           : kernels::RopePairing::kHalves;
}

void CpuEngine::check_token(TokenId id) const {
  if (id < 0 || id >= config().vocab_size)
    throw InputError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(config().vocab_size) + ") of " + weights_.source);
}

void CpuEngine::check_context(int first_position, int n_tokens) const {
  const int max_context = config().max_context;
  if (max_context > 0 && first_position + n_tokens > max_context)
    throw CapacityError("the sequence needs " + std::to_string(first_position + n_tokens) +
                        " positions (" + std::to_string(first_position) + " cached + " +
                        std::to_string(n_tokens) + " new) but " + config().name +
                        " has a context of " + std::to_string(max_context) +
                        " tokens; shorten the prompt or lower --max-new-tokens");
}

void CpuEngine::round_as_device(float* x, size_t n) const {
  if (precision_ == ForwardPrecision::kBf16Device) round_to_bf16(x, static_cast<int64_t>(n));
}

const float* CpuEngine::product_bias(const std::vector<float>& bias) const {
  return precision_ == ForwardPrecision::kBf16Device ? nullptr : bias_or_null(bias);
}

void CpuEngine::rotate_qkv(const LayerWeights& layer, int rows, int first_position, float* q,
                           float* k, float* v) const {
  const ModelConfig& c = config();
  const int d = c.head_dim, Hq = c.n_query_heads, Hkv = c.n_kv_heads;
  const int64_t q_width = static_cast<int64_t>(Hq) * d, kv_width = static_cast<int64_t>(Hkv) * d;
  const bool device = precision_ == ForwardPrecision::kBf16Device;
  const kernels::RopeAngles angles =
      device ? kernels::RopeAngles::kF32Product : kernels::RopeAngles::kDouble;
  // The device's product output, then bf16(that + bias) (kernels/cuda/rope.cuh, with_bias).
  auto round_with_bias = [](float* row, const std::vector<float>& bias, int64_t width) {
    round_to_bf16(row, width);
    if (bias.empty()) return;
    for (int64_t i = 0; i < width; ++i) row[i] += bias[i];
    round_to_bf16(row, width);
  };
  tbb::parallel_for(0, rows, [&](int t) {
    float* q_row = q + t * q_width;
    float* k_row = k + t * kv_width;
    if (device) {
      round_with_bias(q_row, layer.bq, q_width);
      round_with_bias(k_row, layer.bk, kv_width);
      round_with_bias(v + t * kv_width, layer.bv, kv_width);
    }
    kernels::apply_rope(q_row, Hq, d, d, first_position + t, inv_freq_.data(), rope_pairing_,
                        angles);
    kernels::apply_rope(k_row, Hkv, d, d, first_position + t, inv_freq_.data(), rope_pairing_,
                        angles);
    if (device) {
      round_to_bf16(q_row, q_width);
      round_to_bf16(k_row, kv_width);
    }
  });
}

std::vector<float> CpuEngine::output_logits(const float* hidden) const {
  const ModelConfig& c = config();
  std::vector<float> normed(c.d_model);
  kernels::rmsnorm(hidden, weights_.output_norm.data(), 1, c.d_model, c.rms_norm_eps,
                   normed.data());
  round_as_device(normed);
  std::vector<float> logits(c.vocab_size);
  project(weights_.output_matrix(), c.vocab_size, c.d_model, normed.data(), 1, nullptr,
          logits.data());
  return logits;
}

// x += W_down · swiglu(W_gate · rmsnorm(x), W_up · rmsnorm(x)) for `rows` rows of x, in chunks
// of at most 512 rows: the FFN's temporaries (two [rows, ffn] products) then stay a few MB at any
// prompt length, while each chunk is still a large enough GEMM.
void CpuEngine::feed_forward_rows(const LayerWeights& layer, int rows,
                                  std::vector<float>& x) const {
  constexpr int kChunkRows = 512;
  for (int first = 0; first < rows; first += kChunkRows)
    feed_forward_chunk(layer, std::min(kChunkRows, rows - first),
                       x.data() + static_cast<size_t>(first) * config().d_model);
}

void CpuEngine::feed_forward_chunk(const LayerWeights& layer, int rows, float* x) const {
  const ModelConfig& c = config();
  const size_t x_size = static_cast<size_t>(rows) * c.d_model;
  std::vector<float> normed(x_size);
  kernels::rmsnorm(x, layer.ffn_norm.data(), rows, c.d_model, c.rms_norm_eps, normed.data());
  round_as_device(normed);
  std::vector<float> gate(static_cast<size_t>(rows) * c.ffn_dim), up(gate.size());
  if (rows == 1) {
    project_one_row({{&layer.w_gate, c.ffn_dim, nullptr, gate.data()},
                     {&layer.w_up, c.ffn_dim, nullptr, up.data()}},
                    c.d_model, normed.data());
  } else {
    project(layer.w_gate, c.ffn_dim, c.d_model, normed.data(), rows, nullptr, gate.data());
    project(layer.w_up, c.ffn_dim, c.d_model, normed.data(), rows, nullptr, up.data());
  }
  round_as_device(gate);
  round_as_device(up);
  kernels::swiglu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), gate.data());
  up = {};
  round_as_device(gate);
  std::vector<float>& down = normed;  // the normed input is read; its room takes the output
  project(layer.w_down, c.d_model, c.ffn_dim, gate.data(), rows, nullptr, down.data());
  round_as_device(down);
  for (size_t i = 0; i < x_size; ++i) x[i] += down[i];
}

void CpuEngine::take_forced_input(int layer, int p0, int T, std::vector<float>& x) const {
  const auto D = static_cast<size_t>(config().d_model);
  const size_t end = (static_cast<size_t>(p0) + T) * D;
  if (forced_inputs_->size() != static_cast<size_t>(config().n_layers) ||
      (*forced_inputs_)[layer].size() < end)
    throw InputError("force_layer_inputs: the forced inputs (" +
                     std::to_string(forced_inputs_->size()) + " layers) lack layer " +
                     std::to_string(layer) + "'s positions " + std::to_string(p0) + ".." +
                     std::to_string(p0 + T - 1) +
                     "; capture them with CaptureRequest::layer_inputs from a prefill of the same "
                     "prompt on this model");
  std::copy_n((*forced_inputs_)[layer].begin() + static_cast<int64_t>(p0 * D), T * D, x.begin());
}

std::vector<float> CpuEngine::forward_chunk(std::span<const TokenId> ids, KvStore& store,
                                            const CaptureRequest& request, PrefillCapture* capture,
                                            int start_position) {
  const ModelConfig& c = config();
  const int T = static_cast<int>(ids.size());
  if (T == 0) throw InputError("forward_chunk: the chunk of token ids is empty");
  const int p0 = start_position >= 0 ? start_position : next_position(store);
  check_context(p0, T);
  for (TokenId id : ids) check_token(id);
  const int D = c.d_model, d = c.head_dim, Hq = c.n_query_heads, Hkv = c.n_kv_heads;
  const int64_t q_width = static_cast<int64_t>(Hq) * d, kv_width = static_cast<int64_t>(Hkv) * d;

  std::vector<float> x(static_cast<size_t>(T) * D);
  for (int t = 0; t < T; ++t)
    weights_.token_embedding.row_to_f32(ids[t], D, &x[static_cast<size_t>(t) * D]);
  store.reserve(max_head_length(store) + T);

  const bool capturing = capture != nullptr;
  if (capturing) {
    *capture = PrefillCapture{};
    capture->length = T;
    capture->window = std::min(request.window_queries, T);
    capture->query_window.resize(c.n_layers);
    if (request.attention_column_sums) capture->column_sums.resize(c.n_layers);
    if (request.layer_inputs) capture->layer_inputs.resize(c.n_layers);
  }

  std::vector<float> normed(x.size()), q(T * q_width), k(T * kv_width), v(T * kv_width);
  std::vector<float> attended(T * q_width), projected(x.size());
  KvRowScratch rows;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& layer = weights_.layers[l];
    if (forced_inputs_ != nullptr) take_forced_input(l, p0, T, x);
    if (capturing && request.layer_inputs) capture->layer_inputs[l] = x;
    kernels::rmsnorm(x.data(), layer.attn_norm.data(), T, D, c.rms_norm_eps, normed.data());
    round_as_device(normed);
    project(layer.wq, q_width, D, normed.data(), T, product_bias(layer.bq), q.data());
    project(layer.wk, kv_width, D, normed.data(), T, product_bias(layer.bk), k.data());
    project(layer.wv, kv_width, D, normed.data(), T, product_bias(layer.bv), v.data());
    rotate_qkv(layer, T, p0, q.data(), k.data(), v.data());
    for (int t = 0; t < T; ++t) store.append(l, p0 + t, &k[t * kv_width], &v[t * kv_width]);

    kernels::PrefillAttentionArgs attention;
    attention.n_query_heads = Hq;
    attention.n_kv_heads = Hkv;
    attention.head_dim = d;
    attention.n_queries = T;
    attention.queries = q.data();
    attention.output = attended.data();
    if (precision_ == ForwardPrecision::kBf16Device)
      attention.bf16_probability_tile = device_attention_key_tile(d);
    rows_for_attention(store, l, rows, attention);
    if (capturing) {
      const int w = capture->window;
      auto& window = capture->query_window[l];
      window.resize(static_cast<size_t>(Hq) * w * d);
      for (int a = 0; a < Hq; ++a)
        for (int t = 0; t < w; ++t)
          std::copy_n(&q[(T - w + t) * q_width + a * d], d, &window[(a * w + t) * d]);
      if (request.attention_column_sums) {
        auto& sums = capture->column_sums[l];
        sums.assign(static_cast<size_t>(Hq) * T, 0.0f);
        for (int a = 0; a < Hq; ++a) attention.column_sums.push_back(&sums[a * T]);
      }
    }
    kernels::prefill_attention(attention);
    round_as_device(attended);
    project(layer.wo, D, q_width, attended.data(), T, nullptr, projected.data());
    round_as_device(projected);
    add_in_place(x, projected);
    feed_forward_rows(layer, T, x);
  }
  return output_logits(&x[static_cast<size_t>(T - 1) * D]);
}

void CpuEngine::attend_query_head(int layer, int q_head, const float* query, const KvStore& store,
                                  const Selection* selection, const CachePlan& plan, float* output,
                                  float* probabilities) const {
  (void)plan;  // plan.early_exit is handled per KV group by attend_group_early_exit
  const int kv_head = q_head / config().group_size();
  kernels::DecodeAttentionArgs args;
  args.query = query;
  args.keys = store.key_rows(layer, kv_head);
  args.values = store.value_rows(layer, kv_head);
  args.kv_type = store.row_type();
  args.n_entries = store.length(layer, kv_head);
  args.head_dim = config().head_dim;
  args.output = output;
  args.probabilities = probabilities;
  if (precision_ == ForwardPrecision::kBf16Device)
    args.bf16_probability_tile = device_attention_key_tile(config().head_dim);
  if (selection != nullptr && !selection->dense && !selection->indices.empty()) {
    args.indices = selection->indices[q_head].data();
    args.n_indices = static_cast<int>(selection->indices[q_head].size());
    if (!selection->logit_bias.empty() && !selection->logit_bias[q_head].empty())
      args.logit_bias = selection->logit_bias[q_head].data();
  }
  kernels::decode_attention(args);
}

// Without a (non-dense) selection the group walks its KV head's entries together and stops when
// every head is stable (packed GQA); with a selection each query head walks its own entries,
// gathered in store order so that the sink block and recency keep their meaning.
void CpuEngine::attend_group_early_exit(int layer, int kv_head, const float* queries,
                                        const KvStore& store, const Selection* selection,
                                        const EarlyExitParams& params, float* outputs,
                                        std::vector<std::vector<float>>& probabilities,
                                        kernels::EarlyExitWalkStats& stats,
                                        kernels::EarlyExitOracleSummary& oracle) const {
  const int g = config().group_size(), d = config().head_dim;
  const int n = store.length(layer, kv_head);
  const bool want_probabilities = !probabilities.empty();
  kernels::EarlyExitDecodeArgs args;
  args.head_dim = d;
  if (selection == nullptr || selection->dense || selection->indices.empty()) {
    std::vector<float> group_probabilities(want_probabilities ? static_cast<size_t>(g) * n : 0);
    args.queries = queries + static_cast<int64_t>(kv_head) * g * d;
    args.n_heads = g;
    args.keys = store.keys(layer, kv_head);
    args.values = store.values(layer, kv_head);
    args.n_entries = n;
    args.output = outputs + static_cast<int64_t>(kv_head) * g * d;
    args.probabilities = want_probabilities ? group_probabilities.data() : nullptr;
    walk_early_exit(layer, kv_head, args, params, stats, oracle);
    for (int i = 0; want_probabilities && i < g; ++i)
      std::copy_n(&group_probabilities[static_cast<size_t>(i) * n], n,
                  probabilities[kv_head * g + i].data());
    return;
  }
  for (int a = kv_head * g; a < (kv_head + 1) * g; ++a) {
    const std::vector<int32_t>& chosen = selection->indices[a];
    const bool biased = !selection->logit_bias.empty() && !selection->logit_bias[a].empty();
    std::vector<int32_t> order(chosen.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::sort(order.begin(), order.end(),
              [&](int32_t x, int32_t y) { return chosen[x] < chosen[y]; });
    const int m = static_cast<int>(chosen.size());
    std::vector<float> keys(static_cast<size_t>(m) * d), values(keys.size()), bias(biased ? m : 0);
    std::vector<float> gathered_probabilities(want_probabilities ? m : 0);
    for (int i = 0; i < m; ++i) {
      const int32_t j = chosen[order[i]];
      std::copy_n(store.keys(layer, kv_head) + static_cast<int64_t>(j) * d, d,
                  &keys[static_cast<size_t>(i) * d]);
      std::copy_n(store.values(layer, kv_head) + static_cast<int64_t>(j) * d, d,
                  &values[static_cast<size_t>(i) * d]);
      if (biased) bias[i] = selection->logit_bias[a][order[i]];
    }
    args.queries = queries + static_cast<int64_t>(a) * d;
    args.n_heads = 1;
    args.keys = keys.data();
    args.values = values.data();
    args.logit_bias = biased ? bias.data() : nullptr;
    args.n_entries = m;
    args.output = outputs + static_cast<int64_t>(a) * d;
    args.probabilities = want_probabilities ? gathered_probabilities.data() : nullptr;
    walk_early_exit(layer, a, args, params, stats, oracle);
    for (int i = 0; want_probabilities && i < m; ++i)
      probabilities[a][chosen[order[i]]] = gathered_probabilities[i];
  }
}

std::vector<float> CpuEngine::decode_step(TokenId token, int position, int step, KvStore& store,
                                          CachePlan& plan) {
  const ModelConfig& c = config();
  check_token(token);
  check_context(position, 1);
  if (decode_reads_f32_rows(plan)) store.widen();  // start_decode_policies did, unless skipped
  const int D = c.d_model, d = c.head_dim, Hq = c.n_query_heads, Hkv = c.n_kv_heads;
  const int64_t q_width = static_cast<int64_t>(Hq) * d, kv_width = static_cast<int64_t>(Hkv) * d;
  std::vector<float> x(D);
  weights_.token_embedding.row_to_f32(token, D, x.data());
  std::vector<float> normed(D), q(q_width), k(kv_width), v(kv_width), attended(q_width);
  std::vector<float> projected(D);
  std::vector<std::vector<float>> probabilities(plan.decode_eviction ? Hq : 0);
  Selection selection;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& layer = weights_.layers[l];
    kernels::rmsnorm(x.data(), layer.attn_norm.data(), 1, D, c.rms_norm_eps, normed.data());
    round_as_device(normed);
    project_one_row({{&layer.wq, q_width, product_bias(layer.bq), q.data()},
                     {&layer.wk, kv_width, product_bias(layer.bk), k.data()},
                     {&layer.wv, kv_width, product_bias(layer.bv), v.data()}},
                    D, normed.data());
    rotate_qkv(layer, 1, position, q.data(), k.data(), v.data());
    store.append(l, position, k.data(), v.data());

    const Selection* chosen = nullptr;
    if (plan.selector) {
      plan.selector->on_append(store, l);
      selection = Selection{};
      selection.indices.resize(Hq);  // the contract: sized to the query-head count
      plan.selector->select(l, q.data(), store, selection);
      chosen = &selection;
    }
    for (int a = 0; a < static_cast<int>(probabilities.size()); ++a)
      probabilities[a].assign(store.length(l, a / c.group_size()), 0.0f);
    if (plan.early_exit) {
      std::vector<kernels::EarlyExitWalkStats> walks(Hkv);
      std::vector<kernels::EarlyExitOracleSummary> oracles(Hkv);
      tbb::parallel_for(0, Hkv, [&](int h) {
        attend_group_early_exit(l, h, q.data(), store, chosen, *plan.early_exit, attended.data(),
                                probabilities, walks[h], oracles[h]);
      });
      for (int h = 0; h < Hkv; ++h) {
        plan.early_exit_stats.add(walks[h]);
        plan.early_exit_oracle.add(oracles[h]);
      }
    } else {
      tbb::parallel_for(0, Hq, [&](int a) {
        attend_query_head(l, a, &q[a * d], store, chosen, plan, &attended[a * d],
                          probabilities.empty() ? nullptr : probabilities[a].data());
      });
    }
    if (plan.decode_eviction) {
      DecodeStepView view;
      view.layer = l;
      view.step = step;
      view.query = q.data();
      for (const auto& p : probabilities) view.probabilities.push_back(p.data());
      plan.decode_eviction->after_step(view, store);
    }
    round_as_device(attended);
    project(layer.wo, D, q_width, attended.data(), 1, nullptr, projected.data());
    round_as_device(projected);
    add_in_place(x, projected);
    feed_forward_rows(layer, 1, x);
  }
  return output_logits(x.data());
}

}  // namespace kvb
