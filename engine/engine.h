// The engine interfaces.
//
// Engine: what generation and the sweep see, on any device. It holds numbered sequences, each a
// KV cache: prefill one (capturing what its policies ask for), fork it, compact it to kept
// indices per (layer, KV head), append a chunk to several, and decode one greedy step for a batch
// of sequences (all of them or a few), each under its own CachePlan. CpuBackend
// (engine/cpu/cpu_backend.h) and CudaBackend (engine/cuda/cuda_backend.h) implement it;
// make_engine() (engine/engine_factory.h) picks one for a device.
//
// InferenceEngine: the CPU forward pass over one host KvStore (CpuEngine, engine/cpu/forward.h),
// which CpuBackend and the single-sequence Generator (engine/generation.h) drive.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/kv_store.h"
#include "engine/model_config.h"
#include "engine/prefill_capture.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"

namespace kvb {

class InferenceEngine {
 public:
  virtual ~InferenceEngine() = default;
  virtual const ModelConfig& config() const = 0;
  // The f32 weights the engine was built from (policies read W_o from them).
  virtual const ModelWeights& weights() const = 0;
  virtual std::string backend_name() const = 0;  // "cpu", "cuda"

  // The element type of the caches this engine makes (f32 unless the engine says otherwise).
  virtual KvDtype kv_dtype() const { return KvDtype::kF32; }
  // An empty store shaped for this model.
  KvStore make_store() const {
    return KvStore(config().n_layers, config().n_kv_heads, config().head_dim, kv_dtype());
  }

  // Runs `ids` with causal attention over whatever the store holds plus the chunk itself,
  // appending the chunk's K/V. Positions start at `start_position` (one past the store's largest
  // position when negative). With `capture`, records what `request` asks for (valid only for a
  // chunk on an empty store: a prefill). Returns the last token's logits [vocab].
  // Throws CapacityError when the positions would pass the model's context.
  virtual std::vector<float> forward_chunk(std::span<const TokenId> ids, KvStore& store,
                                           const CaptureRequest& request, PrefillCapture* capture,
                                           int start_position) = 0;

  // One decode token at `position`; `step` counts generated tokens (0 = first decode step).
  // Applies the plan's decode selector and decode eviction. Returns logits [vocab].
  virtual std::vector<float> decode_step(TokenId token, int position, int step, KvStore& store,
                                         CachePlan& plan) = 0;
};

// One sequence's input to a batched decode step.
struct DecodeInput {
  int sequence = 0;
  TokenId token = 0;
  int position = 0;
  int step = 0;  // tokens generated before this one (0 = the first decode step)
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const ModelConfig& config() const = 0;
  virtual std::string backend_name() const = 0;  // "cpu", "cuda"
  // The host f32 weights policies read (CriticalKV's W_o).
  virtual const ModelWeights& weights() const = 0;
  virtual int64_t weight_bytes() const = 0;

  // InputError naming the method when this backend cannot run `plan` (checked before a sweep).
  virtual void check_plan(const CachePlan& plan) const = 0;

  // Room for `sequences` empty sequences of up to `capacity` entries per (layer, KV head); whatever
  // was held before is dropped. CapacityError when it does not fit.
  virtual void reserve(int sequences, int capacity) = 0;
  // How many sequences of `capacity` entries fit at once (memory beside the weights).
  virtual int max_sequences(int capacity) const = 0;

  // Full-attention prefill of `ids` into the empty sequence `seq`, recording what `request` asks
  // for into `capture`. Returns the last token's logits.
  virtual std::vector<float> prefill(int seq, std::span<const TokenId> ids,
                                     const CaptureRequest& request, PrefillCapture& capture) = 0;
  // What prefill policies read of sequence `seq` (it holds the whole prompt). Backends whose
  // cache is not in host memory fill `host_copy` and point the view into it.
  virtual PrefillView prefill_view(int seq, const PrefillCapture& capture,
                                   const CaptureRequest& request, KvStore& host_copy) const = 0;
  // The prompt as a host store (policies that read the cache on the host).
  virtual KvStore host_store(int seq) const = 0;
  // The prompt's keys as a host store, for readers of the keys alone (`kvbench calibrate`): a
  // backend whose cache is not in host memory copies no values
  // (KvStore::keys_only); the others may hand over a whole store.
  virtual KvStore host_keys(int seq) const { return host_store(seq); }
  // Sequence `to` becomes a copy of sequence `from`.
  virtual void fork(int from, int to) = 0;
  // Keeps kept[layer][head] of `seq`, with room for `spare_tokens` more per head.
  virtual void compact(int seq, const KeptIndices& kept, int spare_tokens) = 0;
  // Appends the same `ids` (positions from `first_position`) to every sequence in `sequences`
  // with full attention over what each holds. Returns the greedy next token of each.
  virtual std::vector<TokenId> extend(std::span<const int> sequences, std::span<const TokenId> ids,
                                      int first_position) = 0;

  // Before the first decode step of `seq`: `plan` (which must outlive the decode) is what its
  // steps apply; its decode-time policies start on the cache as it is now.
  virtual void start_decode(int seq, CachePlan& plan, int prompt_tokens, int budget_tokens) = 0;
  // After start_decode of every sequence of the batch: builds what the batch's decode steps need
  // (a device engine's selection metadata), so that its cost counts before the first token.
  virtual void prepare_decode() {}
  // One greedy step for each input's sequence; returns each one's next token, in input order.
  // Only the inputs' sequences are computed; every other sequence keeps its cache as it is, so the
  // sequences of one prefill may decode together or one after another at batch 1 each
  // (generate_cells' batch_cells). A device computes the contiguous range of sequences holding
  // the inputs in one step (CudaBackend): its cost is that range's.
  virtual std::vector<TokenId> decode(std::span<const DecodeInput> inputs) = 0;
  // After the last decode step of `seq`: fills what the plan collects (ART's walk counts).
  virtual void finish_decode(int seq) = 0;

  virtual int64_t kv_bytes(int seq) const = 0;  // live entries, as the backend stores them
  // Peak memory of this process on the engine's device (host RSS on the CPU, device bytes in use
  // on a GPU) since the last reset.
  virtual int64_t peak_memory_bytes() const = 0;
  virtual void reset_peak_memory() = 0;
};

// One past the largest position the store holds (0 for an empty store).
int next_position(const KvStore& store);

}  // namespace kvb
