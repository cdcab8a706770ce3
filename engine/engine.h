// The interface a backend's forward pass offers to generation: run a chunk of tokens on top of a
// KV store, and run one decode step under a cache plan. CpuEngine (engine/cpu/forward.h) is the
// reference; a CUDA engine implements the same two calls.
#pragma once

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

  // An empty store shaped for this model.
  KvStore make_store() const {
    return KvStore(config().n_layers, config().n_kv_heads, config().head_dim);
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

// One past the largest position the store holds (0 for an empty store).
int next_position(const KvStore& store);

}  // namespace kvb
