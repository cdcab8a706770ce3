// What the prefill observers recorded for the active policies (CaptureRequest), and the PrefillView
// a PrefillPolicy reads: the store's post-RoPE keys/values plus these captures. Backend-neutral:
// the CPU engine fills it directly, the CUDA engine copies its captures into it.
#pragma once

#include <string>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/kv_store.h"
#include "engine/weights.h"

namespace kvb {

struct PrefillCapture {
  int length = 0;  // prompt tokens L the captures describe
  int window = 0;  // w window queries captured per query head (<= L)
  std::vector<std::vector<float>> query_window;  // per layer [Hq, w, d], post-RoPE
  std::vector<std::vector<float>> column_sums;   // per layer [Hq, L]; empty when not requested
};

// Builds the view of every layer. The store must hold the whole prompt in every head (it is the
// store right after prefill). W_o is exposed when `request.output_projection`.
PrefillView make_prefill_view(const ModelWeights& weights, const KvStore& store,
                              const PrefillCapture& capture, const CaptureRequest& request);

// The captures cut down to what `wanted` asks for: a policy sees exactly its own window even when
// the prefill captured the widest window of several policies.
PrefillCapture captures_for(const PrefillCapture& captured, const CaptureRequest& wanted,
                            int n_query_heads, int head_dim);

// logic_error naming `policy` when `captured` lacks what `wanted` asks for (the prefill must
// capture the union of its cells' requests).
void check_captures(const PrefillCapture& captured, const CaptureRequest& wanted,
                    const std::string& policy);

}  // namespace kvb
