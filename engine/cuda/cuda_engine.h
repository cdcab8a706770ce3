// The engine on the GPU: the same model definitions as the CPU engine (ModelConfig, ModelWeights,
// RoPE pairing) in bf16 with f32 accumulation. Weights come from a model file read tensor by tensor
// (from_source), from host weights already loaded (converted to bf16 at upload) or from a dummy
// preset (random bf16 generated on the device, labelled as such).
//
// KV layout mirrors KvStore: per layer one K and one V buffer; (sequence b, KV head h) owns rows
// offset[l][b*Hkv+h] .. + capacity, of which length[l][b*Hkv+h] are live. Compaction is a gather.
// A batched greedy decode step runs entirely on the device (tokens, positions, lengths live there),
// so it can be captured once into a CUDA graph and replayed; a step may also compute only a
// contiguous range of the sequences (decode_step(first, count, ...)), with a graph per range.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/device_eviction.h"
#include "engine/device_selection.h"
#include "engine/model_config.h"
#include "engine/prefill_capture.h"
#include "engine/weight_source.h"
#include "engine/weights.h"

namespace kvb {

class CudaEngine {
 public:
  // RoPE pairing follows the config (ModelConfig::rope_interleaved_pairs), as on the CPU.
  static std::unique_ptr<CudaEngine> from_weights(const ModelWeights& weights);
  static std::unique_ptr<CudaEngine> from_preset(const ModelConfig& config, uint64_t seed);
  // Uploads the file's tensors one at a time through a bounded pinned buffer
  // (engine/cuda/device_weights.h): no host copy of the model; progress and the final load time
  // and peak host RSS go to stderr.
  static std::unique_ptr<CudaEngine> from_source(const WeightSource& source);
  ~CudaEngine();

  const ModelConfig& config() const;
  int64_t weight_bytes() const;
  // The layer's output projection W_o as f32 [d_model, Hq*d] (out x in), downloaded from the
  // device (the bf16 weights the engine runs on).
  std::vector<float> output_projection(int layer) const;

  // Allocates the cache for `batch` sequences with room for `capacity` entries per (layer, head);
  // frees any previous cache. Throws CapacityError naming the batch and context on OOM.
  void allocate_cache(int batch, int capacity);
  int batch() const;
  int capacity() const;

  // Runs `ids` through the model for sequence `seq` on top of its cache, in chunks of at most
  // `chunk_tokens` (fewer where a chunk's activations would pass 1 GiB: ~7.6K rows on an 8B
  // model); returns the last position's logits (f32).
  static constexpr int kPrefillChunk = 16384;
  std::vector<float> prefill(int seq, const std::vector<int32_t>& ids,
                             int chunk_tokens = kPrefillChunk);
  // The same prefill, also recording what `request` asks for (engine/cuda/prefill_statistics.h):
  // the post-RoPE queries of the last window positions and the statistics computed on the device
  // (attention column sums, window attention sums, output perturbations, key norms); only these
  // leave the device.
  std::vector<float> prefill_with_captures(int seq, const std::vector<int32_t>& ids,
                                           const CaptureRequest& request, PrefillCapture& capture,
                                           int chunk_tokens = kPrefillChunk);
  // Sequence `to` becomes a copy of sequence `from` (cache rows, lengths, next position).
  void copy_sequence(int from, int to);
  // How many sequences of `capacity` entries allocate_cache could hold in the device memory free
  // now (the current cache counted as free), leaving headroom for workspaces.
  int max_batch(int capacity) const;
  int next_position(int seq) const;

  // Keeps kept[layer][head] (strictly increasing indices into the live entries) for sequence seq.
  void compact(int seq, const KeptIndices& kept);
  // Sets every (layer, head) of every sequence to `length` live entries of random content and the
  // next position to `length` (decode latency at batch sizes where prefilling each is pointless).
  void fill_cache_random(int length, uint64_t seed);

  // Sets the tokens to decode next (one per sequence) and their positions.
  void set_next_tokens(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions);
  // The same for sequences first .. first + tokens.size() - 1 only (a sub-batch step's inputs).
  void set_next_tokens(int first, const std::vector<int32_t>& tokens,
                       const std::vector<int32_t>& positions);
  // One greedy step for the whole batch; with use_graph the step is captured once and replayed.
  void decode_step(bool use_graph);
  // One greedy step for sequences [first, first + count) only (a sub-batch): the weights are read
  // once for `count` rows and attention reads only those sequences' caches; the others are left
  // as they are (lengths, positions, tokens, ART and selection state). Each range captures a graph
  // of its own, kept beside the others, so decoding the sequences of a batch one after another at
  // batch 1 replays a graph per sequence. Selection (start_sparse_decode) and ART run in any
  // range; ART's walk counts add up over every step, whatever its range.
  void decode_step(int first, int count, bool use_graph);
  // Appends the same tokens `ids` (a question after compaction) at positions first_position ..
  // to each of sequences [first, first + count) in one forward instead of a decode step per token:
  // every (token, sequence) is a row of the layers' products and attends to its own sequence's
  // cache, ragged per (layer, KV head), up to itself (engine/cpu's forward_chunk over a compacted
  // store computes the same). Returns each sequence's greedy next token after the last id (also
  // next_tokens and last_logits). Not while a decode selection, eviction or ART is active.
  std::vector<int32_t> extend(int first, int count, const std::vector<int32_t>& ids,
                              int first_position);
  std::vector<int32_t> next_tokens() const;  // argmax of the last step, per sequence
  // Sequences [first, first + count) of next_tokens(): what a sub-batch step computed.
  std::vector<int32_t> next_tokens(int first, int count) const;
  std::vector<float> last_logits(int seq) const;  // logits of the last step that computed `seq`

  // ART (kind E): with params the decode step's attention walks every KV group with early exit
  // (kernels/cuda/early_exit_decode.h: sink block, recent-first, the recent split decides);
  // nullopt restores the plain flash-decoding kernel. The GPU walk has 64-entry blocks and no
  // oracle mode (InputError otherwise). Changing it drops the captured decode graph.
  void set_early_exit(const std::optional<EarlyExitParams>& params);
  // KV blocks of every ART walk since the last reset (all layers, steps and KV groups): folded into
  // the output, present, and fetched from memory by any split.
  struct EarlyExitCounts {
    int64_t visited = 0, total = 0, loaded = 0;
  };
  EarlyExitCounts early_exit_counts() const;
  void reset_early_exit_counts();

  // Decode-time selection (kind D) from a policy's generic operations (engine/device_selection.h,
  // engine/cuda/cuda_sparse_decode.h): builds the selection's metadata from the cache as it is now
  // (every sequence at the same length, e.g. after prefill); from then on each decode step selects
  // per layer and attends to the selection, still capturable as one graph. Anything that rewrites
  // the cache (allocate_cache, prefill, compact, fill_cache_random) or stop_sparse_decode returns
  // to dense attention.
  void start_sparse_decode(const DeviceSelectionSpec& spec);
  // The same for sequences [first, first + count) only (every one at the same length; the others
  // may hold anything, e.g. the prompt they were forked from): from then on a decode step must lie
  // within that range (InputError otherwise).
  void start_sparse_decode(const DeviceSelectionSpec& spec, int first, int count);
  void stop_sparse_decode();
  // Sign-code projections fitted on the device since the engine was made, and fits reused: a
  // selection whose prompt keys (their bits), start vectors and fit options equal the last fit's
  // since the last prefill takes its rows instead of fitting again (a prefill forgets them;
  // engine/cuda/cuda_sparse_decode.h, ProjectionFitMemo).
  struct ProjectionFitCounts {
    int fits = 0, reuses = 0;
  };
  ProjectionFitCounts projection_fit_counts() const;
  // Decode-time eviction (kind C) from a policy's generic operations (engine/device_eviction.h,
  // engine/cuda/cuda_decode_eviction.h): from the next step on, each evicting layer of every
  // sequence scores its entries from the step's attention and evicts down to its keep count on the
  // device (lengths() follows), still capturable as one graph. Every sequence of the batch starts
  // from the spec's initial statistic. Not beside a selection or ART (InputError). Anything that
  // rewrites the cache (allocate_cache, prefill, compact, fill_cache_random) or
  // stop_decode_eviction ends it.
  void start_decode_eviction(const DeviceEvictionSpec& spec);
  // The same with the spec's initial statistic given to sequences [first, first + count) only
  // (the others start from zero and must not decode under it).
  void start_decode_eviction(const DeviceEvictionSpec& spec, int first, int count);
  void stop_decode_eviction();
  // With spec.record_origins: where the entries of (layer, seq, head) came from
  // (DeviceEvictionSpec::record_origins); empty for a layer that does not evict.
  std::vector<int32_t> eviction_origins(int layer, int seq, int head) const;
  // The entries query head q_head of sequence seq attended to at `layer` in the last decode step
  // (empty for dense layers), the logit bias of each (empty unless the selection weights its
  // entries), and with spec.record_queries also that step's queries ([Hq, head_dim]).
  std::vector<int32_t> sparse_selection(int layer, int seq, int q_head) const;
  std::vector<float> sparse_selection_bias(int layer, int seq, int q_head) const;
  std::vector<float> sparse_query(int layer, int seq) const;
  // The live keys of one (layer, sequence, KV head), [length, head_dim] (tests).
  std::vector<float> cached_keys(int layer, int seq, int head) const;
  // Every KV head's rows of one (layer, sequence), live or not: [Hkv, capacity, head_dim]
  // (one download; length() says how many rows of each head are live).
  std::vector<float> cached_sequence(int layer, int seq, bool values) const;
  int64_t kv_bytes() const;  // live entries * 2 * head_dim * 2 bytes
  int64_t kv_allocated_bytes() const;
  int length(int layer, int seq, int head) const;
  // Device bytes held through the engine's buffers: now, and the peak since reset_peak_bytes().
  int64_t device_bytes() const;
  int64_t device_peak_bytes() const;
  void reset_peak_bytes();
  void synchronize() const;

 private:
  struct Impl;
  explicit CudaEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether a usable CUDA device is present in this process (false in builds without CUDA).
bool cuda_device_available();

}  // namespace kvb
