// What the prefill observers recorded for the active policies (CaptureRequest), and the PrefillView
// a PrefillPolicy reads: the store's post-RoPE keys/values plus these captures. Backend-neutral:
// the CPU engine fills it directly, the CUDA engine copies its captures into it.
#pragma once

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

}  // namespace kvb
