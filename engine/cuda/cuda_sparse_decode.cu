#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "common/errors.h"
#include "engine/cuda/cuda_sparse_decode.h"
#include "kernels/cpu/fingerprint.h"
#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/fingerprint.h"
#include "kernels/cuda/lsh_sampling.h"
#include "kernels/cuda/page_bounds.h"
#include "kernels/cuda/query_key_scores.h"
#include "kernels/cuda/topk_select.h"

namespace kvb {

using cuda::DeviceBuffer;
using bf16 = __nv_bfloat16;

namespace {

constexpr int kSparseChunk = 64;  // keys per block of the index-list attention
// Sampled lists are sized for the whole cache but hold a few percent of it: larger chunks leave
// fewer blocks with nothing to attend to.
constexpr int kSampledChunk = 256;

using Scores = DeviceSelectionSpec::Scores;

// Per selecting layer: the metadata kept across steps, and the lists of the last step.
struct LayerState {
  DeviceBuffer projection;          // sign codes: [slots, 64, d] f32
  DeviceBuffer codes;               // sign codes: [slots, L] u64
  DeviceBuffer forced_mask;         // sign codes: [slots, words], the forced entries
  DeviceBuffer page_min, page_max;  // page bounds: [slots, max_pages * d] bf16
  DeviceBuffer indices;             // [lists, index_stride] int32
  DeviceBuffer index_offset;        // [B * Hq] int64
  DeviceBuffer index_count;         // [B * Hq] int32
  DeviceBuffer query;               // record_queries: [B, Hq, d] bf16
  DeviceBuffer logit_bias;          // LSH sampling: [lists, index_stride] f32, parallel to indices
  DeviceBuffer row_pointers;        // LSH sampling: [slots] device pointers to [K * L, d] rows
  DeviceBuffer mean;                // LSH sampling: [slots, d] f32, the middle keys' mean
  DeviceBuffer centred_norms;       // LSH sampling: [slots, n_middle] f32
  DeviceBuffer table_codes;         // LSH sampling: [slots, L, n_middle] u16
};

}  // namespace

struct CudaSparseDecode::State {
  DeviceSelectionSpec spec;
  ModelConfig model;
  int batch = 0, capacity = 0, prompt_length = 0;
  int slots = 0, group = 0;
  std::vector<const bf16*> keys;
  ProjectionFitMemo* fits = nullptr;
  std::vector<bool> selecting;
  std::vector<LayerState> layers;
  // Sign codes.
  int k = 0;                 // prompt entries chosen per slot
  int64_t index_stride = 0;  // k + the longest tail (sign codes), the largest k (exact scores)
  int mask_words = 0;
  DeviceBuffer score_keys;
  // Page bounds.
  int max_pages = 0, page_cap = 0, page_budget = 0, lists = 0;
  DeviceBuffer page_scores, page_ids;
  // Exact scores: k of the next step (the step budget); the scores of one layer at a time.
  int step_k = 0;
  DeviceBuffer exact_scores;
  DeviceBuffer topk_workspace;
  // LSH sampling: the hashed (middle) prompt entries [lsh_begin, lsh_end), every distinct set of
  // rows once (by the policy's pointer), and the step's scratch.
  int lsh_begin = 0, lsh_end = 0;
  std::map<const std::vector<float>*, DeviceBuffer> lsh_rows;
  DeviceBuffer query_codes, sampled_mask, sampled_bias;

  int64_t key_slot_stride() const { return int64_t(capacity) * model.head_dim; }
  // A step over sequences [first, first + count) (CudaEngine::decode_step's sub-batch) reads and
  // writes the per-slot and per-head buffers from the first sequence's slots and heads on; the
  // step's scratch (scores, chosen pages) starts at 0 whatever the range.
  int64_t slots_before(int first) const { return int64_t(first) * model.n_kv_heads; }
  int64_t heads_before(int first) const { return int64_t(first) * model.n_query_heads; }
  // The lists one sequence owns in a layer's `indices`, and the entries between two lists.
  int lists_per_sequence() const { return shared_lists() ? model.n_kv_heads : model.n_query_heads; }
  int64_t list_stride() const {
    return spec.scores == Scores::kPageBounds ? int64_t(page_cap) * spec.pages.page_size
                                              : index_stride;
  }
  int32_t* indices_of(const LayerState& layer, int first) const {
    return layer.indices.as<int32_t>() + int64_t(first) * lists_per_sequence() * list_stride();
  }
  bool sign_codes() const { return spec.scores == Scores::kSignCodes; }
  // decode_attention's list heads (offset, count) of the query heads from sequence `first` on.
  int64_t* list_offsets(LayerState& layer, int first) const {
    return layer.index_offset.as<int64_t>() + heads_before(first);
  }
  int32_t* list_counts(LayerState& layer, int first) const {
    return layer.index_count.as<int32_t>() + heads_before(first);
  }
  // The k best of each of `n_lists` lists of `length` f32 scores (nullptr: the caller gives 16-bit
  // keys instead), row after row, into rows of `index_stride` indices; the shared workspace.
  cuda::TopkSelectArgs top_k_of(const float* scores, int n_lists, int length, int k,
                                int32_t* indices, int64_t index_stride) {
    return {.scores = scores,
            .key_stride = length,
            .n_lists = n_lists,
            .length = length,
            .k = k,
            .indices = indices,
            .index_stride = index_stride,
            .workspace = topk_workspace.data(),
            .workspace_bytes = topk_workspace.bytes()};
  }
  // One list per KV head serves the whole group.
  bool shared_lists() const { return sign_codes() || spec.shared_group; }

  // Entries a list keeps at a step with `length` cached entries (DeviceSelectionSpec's rule).
  int step_budget(int length) const {
    const int tokens =
        spec.budget_fraction > 0 ? int(spec.budget_fraction * length) : spec.budget_tokens;
    return std::clamp(tokens, std::min(1, length), length);
  }

  void check_shapes() const {
    const int d = model.head_dim;
    if (d != 64 && d != 128)
      throw InputError("GPU decode selection needs head_dim 64 or 128; " + model.name + " has " +
                       std::to_string(d));
    if (group < 1 || group * model.n_kv_heads != model.n_query_heads || group > 8)
      throw InputError("GPU decode selection needs Hq = g * Hkv with g <= 8; " + model.name +
                       " has " + std::to_string(model.n_query_heads) + " / " +
                       std::to_string(model.n_kv_heads));
    if (prompt_length < 1) throw InputError("GPU decode selection: start it after prefill");
    if (spec.budget_fraction <= 0 && spec.budget_tokens < 1)
      throw InputError("GPU decode selection: the token budget must be >= 1");
    if (spec.scores == Scores::kLshSampling && spec.shared_group)
      throw InputError(
          "GPU decode selection: LSH sampling keeps one list per query head; a list shared by "
          "the GQA group has no device form");
    if (spec.scores == Scores::kExactDot && spec.shared_group)
      throw InputError(
          "GPU decode selection: exact scores select per query head; a list shared by the GQA "
          "group has no device form (select per head, or run on the CPU engine)");
  }

  // The first sequence's key slots of the selecting layers in [first_layer, end_layer), layer
  // after layer, KV head after KV head (the prompt keys the sign codes' rows are fitted to).
  std::vector<const bf16*> prompt_key_slots(int first_layer, int end_layer) const {
    std::vector<const bf16*> slots;
    for (int l = first_layer; l < end_layer; ++l)
      if (selecting[l])
        for (int h = 0; h < model.n_kv_heads; ++h) slots.push_back(keys[l] + h * key_slot_stride());
    return slots;
  }

  // The rows [n_layers, Hkv, 64, d] fitted to the first sequence's prompt keys (the batch
  // replays one prompt), consecutive selecting layers at a time within kFitWorkspaceBytes.
  DeviceBuffer fit_rows_on_device(cudaStream_t stream) {
    static constexpr size_t kFitWorkspaceBytes = size_t{1} << 30;
    const int d = model.head_dim, hkv = model.n_kv_heads;
    const int64_t head_floats = int64_t(cuda::kSignCodeBits) * d;
    const DeviceSelectionSpec::SignCodes::Fit& fit = spec.sign_codes.fit;
    if (fit.starts.size() != size_t(model.n_layers) * hkv * head_floats)
      throw InputError("GPU sign codes: neither projection rows nor start vectors for the fit (" +
                       std::to_string(fit.starts.size()) + " floats; expected n_layers x Hkv x " +
                       "64 x d = " + std::to_string(model.n_layers * hkv * head_floats) + ")");
    DeviceBuffer starts(fit.starts.size() * 4, "fit start vectors");
    cuda::check(cudaMemcpyAsync(starts.data(), fit.starts.data(), starts.bytes(),
                                cudaMemcpyHostToDevice, stream),
                "start vectors upload");
    DeviceBuffer rows(fit.starts.size() * 4, "fitted projection");
    cuda::check(cudaMemsetAsync(rows.data(), 0, rows.bytes(), stream), "memset");
    const size_t per_layer = cuda::binary_fit_projection_workspace_bytes(hkv, prompt_length, d);
    const int layers_per_group = int(std::max<size_t>(1, kFitWorkspaceBytes / per_layer));
    DeviceBuffer workspace, key_pointers(size_t(model.n_layers) * hkv * sizeof(void*), "keys");
    for (int l = 0; l < model.n_layers;) {
      if (!selecting[l]) {
        ++l;
        continue;
      }
      int end = l;
      while (end < model.n_layers && selecting[end] && end - l < layers_per_group) ++end;
      const std::vector<const bf16*> pointers = prompt_key_slots(l, end);
      const int n_slots = (end - l) * hkv;
      const size_t bytes = cuda::binary_fit_projection_workspace_bytes(n_slots, prompt_length, d);
      if (workspace.bytes() < bytes) workspace = DeviceBuffer(bytes, "fit workspace");
      const bf16** device_pointers = key_pointers.as<const bf16*>() + int64_t(l) * hkv;
      cuda::check(cudaMemcpyAsync(device_pointers, pointers.data(), pointers.size() * sizeof(void*),
                                  cudaMemcpyHostToDevice, stream),
                  "key pointers upload");
      cuda::binary_fit_projection({.keys = device_pointers,
                                   .n_slots = n_slots,
                                   .head_dim = d,
                                   .length = prompt_length,
                                   .iterations = fit.iterations,
                                   .recompute_signs = fit.recompute_signs,
                                   .starts = starts.as<float>() + int64_t(l) * hkv * head_floats,
                                   .projection = rows.as<float>() + int64_t(l) * hkv * head_floats,
                                   .workspace = workspace.data()},
                                  stream);
      // Done before the host pointer list leaves scope and the next group replaces the workspace.
      cuda::check(cudaStreamSynchronize(stream), "projection fit");
      l = end;
    }
    return rows;
  }

  // What fit_rows_on_device's rows are a function of: the bits of the first sequence's prompt
  // keys in every selecting layer (summed on the device), the start vectors, the options and
  // the shapes.
  uint64_t fit_fingerprint(cudaStream_t stream) const {
    const int hkv = model.n_kv_heads;
    uint64_t fingerprint = kernels::fingerprint_combine(0, uint64_t(model.n_layers));
    for (int l = 0; l < model.n_layers; ++l)
      fingerprint = kernels::fingerprint_combine(fingerprint, selecting[l]);
    const std::vector<const bf16*> pointers = prompt_key_slots(0, model.n_layers);
    const int n_slots = int(pointers.size());
    DeviceBuffer device_pointers(pointers.size() * sizeof(void*), "key pointers"),
        sums(pointers.size() * 8, "key fingerprints");
    cuda::check(cudaMemcpyAsync(device_pointers.data(), pointers.data(), device_pointers.bytes(),
                                cudaMemcpyHostToDevice, stream),
                "key pointers upload");
    cuda::fingerprint_rows(device_pointers.as<const bf16*>(), n_slots,
                           int64_t(prompt_length) * model.head_dim, sums.as<uint64_t>(), stream);
    std::vector<uint64_t> per_slot(n_slots);
    cuda::check(
        cudaMemcpyAsync(per_slot.data(), sums.data(), sums.bytes(), cudaMemcpyDeviceToHost, stream),
        "key fingerprints download");
    cuda::check(cudaStreamSynchronize(stream), "key fingerprints");
    for (uint64_t value : per_slot) fingerprint = kernels::fingerprint_combine(fingerprint, value);
    const DeviceSelectionSpec::SignCodes::Fit& fit = spec.sign_codes.fit;
    for (uint64_t value :
         {uint64_t(hkv), uint64_t(model.head_dim), uint64_t(prompt_length),
          uint64_t(fit.iterations), uint64_t(fit.recompute_signs),
          kernels::fingerprint_rows(reinterpret_cast<const uint16_t*>(fit.starts.data()),
                                    int64_t(fit.starts.size()) * 2)})
      fingerprint = kernels::fingerprint_combine(fingerprint, value);
    return fingerprint;
  }

  // The fitted rows: the engine's memo when it holds this fit already, else a new fit (kept in
  // the memo for the next selection, or in `own` without one).
  const DeviceBuffer& fitted_rows(DeviceBuffer& own, cudaStream_t stream) {
    if (!fits) return own = fit_rows_on_device(stream);
    const uint64_t fingerprint = fit_fingerprint(stream);
    if (fits->rows.bytes() != 0 && fits->fingerprint == fingerprint) {
      ++fits->reuses;
      return fits->rows;
    }
    fits->rows = DeviceBuffer();  // free the last fit's rows before fitting
    fits->rows = fit_rows_on_device(stream);
    fits->fingerprint = fingerprint;
    ++fits->fits;
    return fits->rows;
  }

  void build_sign_codes(cudaStream_t stream) {
    const int d = model.head_dim;
    const int64_t per_sequence =
        int64_t(model.n_layers) * model.n_kv_heads * cuda::kSignCodeBits * d;
    const std::vector<float>& projection = spec.sign_codes.projection;
    const size_t given = projection.size();
    if (given != 0 && given != size_t(per_sequence) && given != size_t(per_sequence * batch))
      throw InputError("GPU sign codes: the projection holds " + std::to_string(given) +
                       " floats; expected n_layers x Hkv x 64 x d = " +
                       std::to_string(per_sequence) + " (or that per sequence of the batch)");
    // Every (layer, KV head)'s rows on the device: fitted there, or the given ones uploaded, one
    // set for the whole batch (sequence stride 0) or one per sequence.
    DeviceBuffer own;
    const DeviceBuffer& rows =
        given == 0 ? fitted_rows(own, stream) : (own = DeviceBuffer(given * 4, "code projections"));
    if (given != 0)
      cuda::check(
          cudaMemcpyAsync(own.data(), projection.data(), given * 4, cudaMemcpyHostToDevice, stream),
          "projection upload");
    const int64_t sequence_stride = given > size_t(per_sequence) ? per_sequence : 0;
    k = step_budget(prompt_length);
    index_stride = k + (capacity - prompt_length);
    mask_words = (prompt_length + 31) / 32;
    const bool forced = spec.sign_codes.force_worst_reconstructed;
    const int err_k =
        std::min(std::max(int(spec.sign_codes.forced_error_ratio * k), 1), prompt_length);
    score_keys = DeviceBuffer(size_t(slots) * prompt_length * 2, "code scores");
    topk_workspace =
        DeviceBuffer(cuda::topk_select_workspace_bytes(slots, prompt_length, cuda::TopkKeys::kU16),
                     "top-k workspace");
    DeviceBuffer errors, forced_set;
    if (forced) {
      errors = DeviceBuffer(size_t(slots) * prompt_length * 4, "code errors");
      forced_set = DeviceBuffer(size_t(slots) * err_k * 4, "forced set");
    }
    const int64_t layer_floats = int64_t(model.n_kv_heads) * cuda::kSignCodeBits * d;
    for (int l = 0; l < model.n_layers; ++l) {
      if (!selecting[l]) continue;
      LayerState& layer = layers[l];
      layer.projection = DeviceBuffer(size_t(batch) * layer_floats * 4, "code projection");
      for (int b = 0; b < batch; ++b)  // the layer's [slots, 64, d], sequence after sequence
        cuda::check(cudaMemcpyAsync(layer.projection.as<float>() + b * layer_floats,
                                    rows.as<float>() + b * sequence_stride + l * layer_floats,
                                    layer_floats * 4, cudaMemcpyDeviceToDevice, stream),
                    "projection copy");
      layer.codes = DeviceBuffer(size_t(slots) * prompt_length * 8, "sign codes");
      layer.forced_mask = DeviceBuffer(size_t(slots) * mask_words * 4, "forced mask");
      cuda::check(cudaMemsetAsync(layer.forced_mask.data(), 0, layer.forced_mask.bytes(), stream),
                  "memset");
      cuda::BinaryHashKeysArgs hash;
      hash.projection = layer.projection.as<float>();
      hash.keys = keys[l];
      hash.key_slot_stride = key_slot_stride();
      hash.n_slots = slots;
      hash.head_dim = d;
      hash.begin = 0;
      hash.end = prompt_length;
      hash.codes = layer.codes.as<uint64_t>();
      hash.code_slot_stride = prompt_length;
      hash.reconstruction_error = forced ? errors.as<float>() : nullptr;
      cuda::binary_hash_keys(hash, stream);
      if (forced) {
        cuda::topk_select(top_k_of(errors.as<float>(), slots, prompt_length, err_k,
                                   forced_set.as<int32_t>(), err_k),
                          stream);
        cuda::binary_mark_tokens(forced_set.as<int32_t>(), err_k, slots, err_k,
                                 layer.forced_mask.as<uint32_t>(), mask_words, stream);
      }
      layer.indices = DeviceBuffer(size_t(slots) * index_stride * 4, "code lists");
      allocate_list_heads(layer);
      // The temporaries above die at the end of this function: finish with them first.
      cuda::check(cudaStreamSynchronize(stream), "sign codes start");
    }
  }

  void build_page_bounds(cudaStream_t stream) {
    const int d = model.head_dim, P = spec.pages.page_size;
    if (P < 1 || spec.pages.min_pages < 1)
      throw InputError("GPU page bounds: page_size and min_pages must be >= 1");
    max_pages = (capacity + P - 1) / P;
    page_cap = cuda::pages_for_budget(capacity, step_budget(capacity), P, spec.pages.min_pages);
    lists = spec.shared_group ? slots : batch * model.n_query_heads;
    page_scores = DeviceBuffer(size_t(lists) * max_pages * 4, "page scores");
    page_ids = DeviceBuffer(size_t(lists) * page_cap * 4, "chosen pages");
    topk_workspace =
        DeviceBuffer(cuda::topk_select_workspace_bytes(lists, max_pages, cuda::TopkKeys::kF32),
                     "top-k workspace");
    for (int l = 0; l < model.n_layers; ++l) {
      if (!selecting[l]) continue;
      LayerState& layer = layers[l];
      layer.page_min = DeviceBuffer(size_t(slots) * max_pages * d * 2, "page min");
      layer.page_max = DeviceBuffer(size_t(slots) * max_pages * d * 2, "page max");
      cuda::PageBoundsArgs pages = page_bounds_of(layer, 0, batch);
      pages.begin = 0;
      pages.end = prompt_length;
      cuda::update_page_bounds(pages, stream);
      layer.indices = DeviceBuffer(size_t(lists) * page_cap * P * 4, "page lists");
      allocate_list_heads(layer);
    }
    cuda::check(cudaStreamSynchronize(stream), "page bounds start");
  }

  // Nothing to build: every step scores the whole cache. The lists hold at most the budget at
  // the capacity (the budget never shrinks as the cache grows).
  void build_exact_scores() {
    lists = batch * model.n_query_heads;
    index_stride = step_budget(capacity);
    exact_scores = DeviceBuffer(size_t(lists) * capacity * 4, "exact scores");
    topk_workspace =
        DeviceBuffer(cuda::topk_select_workspace_bytes(lists, capacity, cuda::TopkKeys::kF32),
                     "top-k workspace");
    for (int l = 0; l < model.n_layers; ++l) {
      if (!selecting[l]) continue;
      layers[l].indices = DeviceBuffer(size_t(lists) * index_stride * 4, "exact lists");
      allocate_list_heads(layers[l]);
    }
  }

  int lsh_hashed() const { return lsh_end - lsh_begin; }

  void check_lsh_spec() const {
    const DeviceSelectionSpec::LshSampling& lsh = spec.lsh_sampling;
    if (lsh.bits_per_table < 0 || lsh.bits_per_table > 16 || lsh.tables < 1 ||
        lsh.min_collisions < 1 || lsh.exact_first < 0 || lsh.exact_last < 0 || !lsh.projection)
      throw InputError(
          "GPU LSH sampling needs 0 <= K <= 16 bits per table, L >= 1 tables, min_collisions >= "
          "1, exact entry counts >= 0 and the projection rows; got K " +
          std::to_string(lsh.bits_per_table) + ", L " + std::to_string(lsh.tables) +
          ", min_collisions " + std::to_string(lsh.min_collisions));
  }

  // The device copy of the rows of (layer, KV head), uploaded once per distinct set of rows;
  // `held` keeps the policy's rows alive while their address is a key.
  const float* lsh_rows_of(int layer, int h,
                           std::vector<std::shared_ptr<const std::vector<float>>>& held) {
    const DeviceSelectionSpec::LshSampling& lsh = spec.lsh_sampling;
    std::shared_ptr<const std::vector<float>> rows = lsh.projection(layer, h, model.head_dim);
    const size_t floats = size_t(lsh.bits_per_table) * lsh.tables * model.head_dim;
    if (!rows || rows->size() != floats)
      throw InputError("GPU LSH sampling: the rows of layer " + std::to_string(layer) +
                       ", KV head " + std::to_string(h) + " hold " +
                       std::to_string(rows ? rows->size() : 0) +
                       " floats; expected K x L x d = " + std::to_string(floats));
    auto found = lsh_rows.find(rows.get());
    if (found == lsh_rows.end()) {
      DeviceBuffer copy(std::max<size_t>(floats, 1) * 4, "LSH rows");
      if (floats > 0) copy.upload(rows->data(), floats * 4);
      found = lsh_rows.emplace(rows.get(), std::move(copy)).first;
      held.push_back(std::move(rows));
    }
    return found->second.as<float>();
  }

  // Per selecting layer: the rows of every slot, the middle keys' mean, their codes and centred
  // norms, and lists with room for every entry of the cache.
  void build_lsh_sampling(cudaStream_t stream) {
    check_lsh_spec();
    const DeviceSelectionSpec::LshSampling& lsh = spec.lsh_sampling;
    const int d = model.head_dim, L = lsh.tables;
    lsh_begin = std::min(lsh.exact_first, prompt_length);
    lsh_end = std::max(lsh_begin, prompt_length - lsh.exact_last);
    const int64_t n = lsh_hashed(), words = (n + 31) / 32;
    lists = batch * model.n_query_heads;
    index_stride = capacity;
    query_codes = DeviceBuffer(size_t(lists) * L * 2, "query codes");
    sampled_mask = DeviceBuffer(std::max<size_t>(size_t(lists) * words, 1) * 4, "sampled mask");
    sampled_bias = DeviceBuffer(std::max<size_t>(size_t(lists) * n, 1) * 4, "sampled bias");
    std::vector<std::shared_ptr<const std::vector<float>>> held;
    for (int l = 0; l < model.n_layers; ++l) {
      if (!selecting[l]) continue;
      LayerState& layer = layers[l];
      std::vector<const float*> pointers(slots);
      for (int h = 0; h < model.n_kv_heads; ++h) {
        const float* rows = lsh_rows_of(l, h, held);
        for (int b = 0; b < batch; ++b) pointers[b * model.n_kv_heads + h] = rows;
      }
      layer.row_pointers = DeviceBuffer(pointers.size() * sizeof(const float*), "LSH row pointers");
      layer.row_pointers.upload(pointers.data(), pointers.size() * sizeof(const float*));
      layer.mean = DeviceBuffer(size_t(slots) * d * 4, "LSH mean");
      layer.table_codes = DeviceBuffer(std::max<size_t>(size_t(slots) * L * n, 1) * 2, "LSH codes");
      layer.centred_norms = DeviceBuffer(std::max<size_t>(size_t(slots) * n, 1) * 4, "LSH norms");
      cuda::lsh_key_mean({.keys = keys[l],
                          .key_slot_stride = key_slot_stride(),
                          .n_slots = slots,
                          .head_dim = d,
                          .begin = lsh_begin,
                          .end = lsh_end,
                          .mean = layer.mean.as<float>()},
                         stream);
      cuda::lsh_hash_keys({.projections = layer.row_pointers.as<const float*>(),
                           .bits_per_table = lsh.bits_per_table,
                           .tables = L,
                           .keys = keys[l],
                           .key_slot_stride = key_slot_stride(),
                           .mean = layer.mean.as<float>(),
                           .n_slots = slots,
                           .head_dim = d,
                           .begin = lsh_begin,
                           .end = lsh_end,
                           .codes = layer.table_codes.as<uint16_t>(),
                           .code_slot_stride = L * n,
                           .code_table_stride = n,
                           .centred_norms = layer.centred_norms.as<float>(),
                           .norm_slot_stride = n},
                          stream);
      layer.indices = DeviceBuffer(size_t(lists) * index_stride * 4, "sampled lists");
      layer.logit_bias = DeviceBuffer(size_t(lists) * index_stride * 4, "sampled biases");
      allocate_list_heads(layer);
    }
    cuda::check(cudaStreamSynchronize(stream), "LSH sampling start");
  }

  void attend_lsh_sampling(LayerState& layer, cuda::DecodeAttentionArgs& a, int first,
                           cudaStream_t stream) {
    const DeviceSelectionSpec::LshSampling& lsh = spec.lsh_sampling;
    const int64_t slots0 = slots_before(first), heads0 = heads_before(first);
    const int d = model.head_dim, L = lsh.tables;
    const int64_t n = lsh_hashed();
    const float* const* rows = layer.row_pointers.as<const float*>() + slots0;
    cuda::lsh_hash_queries({.projections = rows,
                            .bits_per_table = lsh.bits_per_table,
                            .tables = L,
                            .q = a.q,
                            .q_seq_stride = a.q_seq_stride,
                            .batch = a.batch,
                            .n_query_heads = model.n_query_heads,
                            .n_kv_heads = model.n_kv_heads,
                            .head_dim = d,
                            .codes = query_codes.as<uint16_t>()},
                           stream);
    cuda::LshSampleListsArgs sample{.bits_per_table = lsh.bits_per_table,
                                    .tables = L,
                                    .min_collisions = lsh.min_collisions,
                                    .q = a.q,
                                    .q_seq_stride = a.q_seq_stride,
                                    .query_codes = query_codes.as<uint16_t>(),
                                    .keys = keys_of(layer) + slots0 * key_slot_stride(),
                                    .key_slot_stride = key_slot_stride(),
                                    .lengths = a.kv_length,
                                    .mean = layer.mean.as<float>() + slots0 * d,
                                    .codes = layer.table_codes.as<uint16_t>() + slots0 * L * n,
                                    .code_slot_stride = L * n,
                                    .code_table_stride = n,
                                    .centred_norms = layer.centred_norms.as<float>() + slots0 * n,
                                    .norm_slot_stride = n,
                                    .begin = lsh_begin,
                                    .end = lsh_end,
                                    .batch = a.batch,
                                    .n_query_heads = model.n_query_heads,
                                    .n_kv_heads = model.n_kv_heads,
                                    .head_dim = d,
                                    .sampled_mask = sampled_mask.as<uint32_t>(),
                                    .sampled_bias = sampled_bias.as<float>(),
                                    .indices = indices_of(layer, first),
                                    .logit_bias = bias_of(layer, first),
                                    .index_stride = index_stride,
                                    .index_offset = layer.index_offset.as<int64_t>() + heads0,
                                    .index_count = layer.index_count.as<int32_t>() + heads0};
    cuda::lsh_sample_lists(sample, stream);
    a.logit_bias = bias_of(layer, first);
    a.max_kv_length = int(index_stride);
  }

  float* bias_of(const LayerState& layer, int first) const {
    return layer.logit_bias.as<float>() + int64_t(first) * lists_per_sequence() * list_stride();
  }

  void allocate_list_heads(LayerState& layer) {
    const size_t heads = size_t(batch) * model.n_query_heads;
    layer.index_offset = DeviceBuffer(heads * 8, "list offsets");
    layer.index_count = DeviceBuffer(heads * 4, "list counts");
    if (spec.record_queries) layer.query = DeviceBuffer(heads * model.head_dim * 2, "queries");
  }

  void attend_sign_codes(LayerState& layer, cuda::DecodeAttentionArgs& a, int first,
                         cudaStream_t stream) {
    const int64_t slots0 = slots_before(first);
    cuda::BinaryScoreKeysArgs score;
    score.projection = layer.projection.as<float>() + slots0 * cuda::kSignCodeBits * model.head_dim;
    score.q = a.q;
    score.q_seq_stride = a.q_seq_stride;
    score.head_dim = model.head_dim;
    score.codes = layer.codes.as<uint64_t>() + slots0 * prompt_length;
    score.code_slot_stride = prompt_length;
    score.forced_mask = layer.forced_mask.as<uint32_t>() + slots0 * mask_words;
    score.mask_slot_stride = mask_words;
    score.batch = a.batch;
    score.n_query_heads = model.n_query_heads;
    score.n_kv_heads = model.n_kv_heads;
    score.length = prompt_length;
    score.keys = score_keys.as<uint16_t>();
    score.key_slot_stride = prompt_length;
    cuda::binary_score_keys(score, stream);
    cuda::TopkSelectArgs top = top_k_of(nullptr, a.batch * model.n_kv_heads, prompt_length, k,
                                        indices_of(layer, first), index_stride);
    top.keys16 = score_keys.as<uint16_t>();
    top.tail_begin = prompt_length;
    top.tail_end = a.kv_length;  // the decode tokens, this step's included
    top.heads_per_list = group;
    top.index_offset = list_offsets(layer, first);
    top.index_count = list_counts(layer, first);
    cuda::topk_select(top, stream);
    a.max_kv_length = int(index_stride);
  }

  void attend_page_bounds(LayerState& layer, cuda::DecodeAttentionArgs& a, int first,
                          cudaStream_t stream) {
    const int d = model.head_dim, P = spec.pages.page_size;
    const int step_lists = a.batch * lists_per_sequence();
    cuda::PageBoundsArgs pages = page_bounds_of(layer, first, a.batch);
    pages.lengths = a.kv_length;
    cuda::update_page_bounds(pages, stream);
    cuda::PageScoreArgs scores;
    scores.q = a.q;
    scores.q_seq_stride = a.q_seq_stride;
    scores.batch = a.batch;
    scores.n_query_heads = model.n_query_heads;
    scores.n_kv_heads = model.n_kv_heads;
    scores.head_dim = d;
    scores.page_min = pages.page_min;
    scores.page_max = pages.page_max;
    scores.page_slot_stride = int64_t(max_pages) * d;
    scores.max_pages = max_pages;
    scores.n_pages = max_pages;
    scores.shared = spec.shared_group;
    scores.keep_last_page = spec.pages.keep_last_page;
    scores.scores = page_scores.as<float>();
    scores.score_stride = max_pages;
    scores.lengths = a.kv_length;
    scores.page_size = P;
    cuda::page_bound_scores(scores, stream);
    // page_budget <= the pages every slot holds, so no absent (-inf) page is chosen.
    cuda::topk_select(top_k_of(page_scores.as<float>(), step_lists, max_pages, page_budget,
                               page_ids.as<int32_t>(), page_cap),
                      stream);
    cuda::ExpandPagesArgs expand;
    expand.pages = page_ids.as<int32_t>();
    expand.page_stride = page_cap;
    expand.n_lists = step_lists;
    expand.n_selected = page_budget;
    expand.page_size = P;
    expand.lengths = a.kv_length;
    expand.lists_per_slot = spec.shared_group ? 1 : group;
    expand.indices = indices_of(layer, first);
    expand.index_stride = int64_t(page_cap) * P;
    expand.heads_per_list = spec.shared_group ? group : 1;
    expand.index_offset = list_offsets(layer, first);
    expand.index_count = list_counts(layer, first);
    cuda::expand_pages(expand, stream);
    a.max_kv_length = page_budget * P;
  }

  void attend_exact_scores(LayerState& layer, cuda::DecodeAttentionArgs& a, int first,
                           cudaStream_t stream) {
    cuda::query_key_scores(
        cuda::decode_step_scores(a, keys_of(layer) + slots_before(first) * key_slot_stride(),
                                 key_slot_stride(), capacity, exact_scores.as<float>(), capacity),
        stream);
    // step_k <= the entries every slot holds, so no absent (-inf) entry is chosen.
    cuda::TopkSelectArgs top = top_k_of(exact_scores.as<float>(), a.batch * model.n_query_heads,
                                        capacity, step_k, indices_of(layer, first), index_stride);
    top.index_offset = list_offsets(layer, first);
    top.index_count = list_counts(layer, first);
    cuda::topk_select(top, stream);
    a.max_kv_length = step_k;
  }

  const bf16* keys_of(const LayerState& layer) const { return keys[&layer - layers.data()]; }

  // The page bounds of `layer` over the keys of sequences [first, first + count); the caller
  // names the tokens to fold in (a range after prefill, the device lengths in a decode step).
  cuda::PageBoundsArgs page_bounds_of(LayerState& layer, int first, int count) const {
    const int64_t slots0 = slots_before(first);
    const int64_t bounds0 = slots0 * max_pages * model.head_dim;
    cuda::PageBoundsArgs pages;
    pages.keys = keys_of(layer) + slots0 * key_slot_stride();
    pages.key_slot_stride = key_slot_stride();
    pages.n_slots = count * model.n_kv_heads;
    pages.head_dim = model.head_dim;
    pages.page_size = spec.pages.page_size;
    pages.page_min = layer.page_min.as<bf16>() + bounds0;
    pages.page_max = layer.page_max.as<bf16>() + bounds0;
    pages.page_slot_stride = int64_t(max_pages) * model.head_dim;
    pages.max_pages = max_pages;
    return pages;
  }
};

CudaSparseDecode::CudaSparseDecode(DeviceSelectionSpec spec, const SparseCacheView& cache,
                                   cudaStream_t stream)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.spec = std::move(spec);
  s.model = *cache.config;
  s.batch = cache.batch;
  s.capacity = cache.capacity;
  s.prompt_length = cache.length;
  s.slots = cache.batch * s.model.n_kv_heads;
  s.group = s.model.n_query_heads / std::max(1, s.model.n_kv_heads);
  s.keys = cache.keys;
  s.fits = cache.fits;
  s.check_shapes();
  s.selecting.assign(s.model.n_layers, true);
  for (int layer : s.spec.dense_layers)
    if (layer >= 0 && layer < s.model.n_layers) s.selecting[layer] = false;
  s.layers.resize(s.model.n_layers);
  try {
    switch (s.spec.scores) {
      case Scores::kSignCodes:
        s.build_sign_codes(stream);
        break;
      case Scores::kPageBounds:
        s.build_page_bounds(stream);
        break;
      case Scores::kExactDot:
        s.build_exact_scores();
        break;
      case Scores::kLshSampling:
        s.build_lsh_sampling(stream);
        break;
    }
  } catch (const cuda::OutOfMemory& e) {
    throw CapacityError(std::string("decode selection metadata does not fit on the GPU: ") +
                        e.what());
  }
  prepare_step(s.prompt_length + 1);
}

CudaSparseDecode::~CudaSparseDecode() = default;

bool CudaSparseDecode::selects(int layer) const { return state_->selecting[layer]; }

int CudaSparseDecode::prepare_step(int length) {
  State& s = *state_;
  switch (s.spec.scores) {
    case Scores::kSignCodes:
      return 0;
    case Scores::kPageBounds:
      s.page_budget = cuda::pages_for_budget(length, s.step_budget(length), s.spec.pages.page_size,
                                             s.spec.pages.min_pages);
      return s.page_budget;
    case Scores::kExactDot:
      s.step_k = s.step_budget(length);
      return s.step_k;
    case Scores::kLshSampling:  // every size is fixed; the lengths come from the device
      return 0;
  }
  return 0;
}

void CudaSparseDecode::attend(int layer, cuda::DecodeAttentionArgs a, int first,
                              cudaStream_t stream) {
  State& s = *state_;
  LayerState& state = s.layers[layer];
  if (first < 0 || a.batch < 1 || first + a.batch > s.batch)
    throw std::logic_error("CudaSparseDecode::attend: sequences outside the batch");
  switch (s.spec.scores) {
    case Scores::kSignCodes:
      s.attend_sign_codes(state, a, first, stream);
      break;
    case Scores::kPageBounds:
      s.attend_page_bounds(state, a, first, stream);
      break;
    case Scores::kExactDot:
      s.attend_exact_scores(state, a, first, stream);
      break;
    case Scores::kLshSampling:
      s.attend_lsh_sampling(state, a, first, stream);
      break;
  }
  a.indices = s.indices_of(state, first);
  a.index_offset = state.index_offset.as<int64_t>() + s.heads_before(first);
  a.index_count = state.index_count.as<int32_t>() + s.heads_before(first);
  a.shared_group_lists = s.shared_lists();
  // A list of ~2K gathered rows per query head: chunks of 64 keys put ~1K blocks in flight, each
  // with two dependent gather rounds, instead of ~300 blocks walking 256 keys (the automatic
  // choice), which left the step waiting on gather latency. Shared lists: one 64-key tile per
  // block of the group.
  a.chunk_size = s.spec.scores == Scores::kLshSampling ? kSampledChunk : kSparseChunk;
  cuda::decode_attention(a, stream);
  // After the attention (the queries stay in place until the output projection), so that the
  // selection kernels, launched overlapped, follow kernels only.
  if (s.spec.record_queries)
    cuda::check(cudaMemcpy2DAsync(state.query.as<bf16>() + s.heads_before(first) * s.model.head_dim,
                                  size_t(s.model.n_query_heads) * s.model.head_dim * 2, a.q,
                                  size_t(a.q_seq_stride) * 2,
                                  size_t(s.model.n_query_heads) * s.model.head_dim * 2, a.batch,
                                  cudaMemcpyDeviceToDevice, stream),
                "record queries");
}

std::vector<int32_t> CudaSparseDecode::selection(int layer, int seq, int q_head,
                                                 cudaStream_t stream) const {
  const State& s = *state_;
  const LayerState& state = s.layers.at(layer);
  if (!s.selecting[layer]) return {};
  cuda::check(cudaStreamSynchronize(stream), "selection");
  const int64_t head = int64_t(seq) * s.model.n_query_heads + q_head;
  int64_t offset = 0;
  int32_t count = 0;
  state.index_offset.download(&offset, 8, head * 8);
  state.index_count.download(&count, 4, head * 4);
  // The offset is from the indices of the first sequence of the step that wrote it (attend):
  // within its sequence's lists it is the same whatever the step's range.
  const int64_t per_sequence = int64_t(s.lists_per_sequence()) * s.list_stride();
  offset = int64_t(seq) * per_sequence + offset % per_sequence;
  std::vector<int32_t> out(count);
  if (count > 0) state.indices.download(out.data(), size_t(count) * 4, offset * 4);
  return out;
}

std::vector<float> CudaSparseDecode::selection_bias(int layer, int seq, int q_head,
                                                    cudaStream_t stream) const {
  const State& s = *state_;
  const LayerState& state = s.layers.at(layer);
  if (!s.selecting[layer] || !state.logit_bias.data()) return {};
  cuda::check(cudaStreamSynchronize(stream), "selection bias");
  const int64_t head = int64_t(seq) * s.model.n_query_heads + q_head;
  int32_t count = 0;
  state.index_count.download(&count, 4, head * 4);
  std::vector<float> out(count);
  if (count > 0)
    state.logit_bias.download(out.data(), size_t(count) * 4, head * s.index_stride * 4);
  return out;
}

std::vector<float> CudaSparseDecode::recorded_query(int layer, int seq, cudaStream_t stream) const {
  const State& s = *state_;
  const LayerState& state = s.layers.at(layer);
  if (!state.query.data()) return {};
  cuda::check(cudaStreamSynchronize(stream), "recorded query");
  const size_t n = size_t(s.model.n_query_heads) * s.model.head_dim;
  std::vector<bf16> bits(n);
  state.query.download(bits.data(), n * 2, seq * n * 2);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(bits[i]);
  return out;
}

}  // namespace kvb
