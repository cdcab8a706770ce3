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
  int window = 0;  // w window queries captured per query head (<= L): the widest any policy asked
                   // for; a policy with a smaller window reads the last rows
  std::vector<std::vector<float>> query_window;  // per layer [Hq, w, d], post-RoPE
  std::vector<std::vector<float>> column_sums;   // per layer [Hq, L]; empty when not requested
  // The device statistics of CaptureRequest (a CPU backend leaves them empty).
  struct WindowSums {
    WindowSumsRequest request;
    std::vector<std::vector<float>> per_layer;  // [Hq, L]
  };
  std::vector<WindowSums> window_attention_sums;
  struct Perturbation {
    PerturbationRequest request;
    std::vector<std::vector<float>> per_layer;  // [Hkv, L]
  };
  std::vector<Perturbation> output_perturbations;
  std::vector<std::vector<float>> key_norms;  // per layer [Hkv, L]; empty when not computed
  std::vector<std::vector<float>> projected_value_norms;  // per layer [Hkv, L]; likewise
  std::vector<std::vector<float>> layer_inputs;  // per layer [L, d_model]; empty unless requested
};

// Builds the view of every layer. `store` (nullptr: a device backend's view without the prompt's
// keys and values) must hold the whole prompt in every head (it is the store right after
// prefill). W_o is exposed when `request.output_projection`, or for
// `request.projected_value_norms` when the capture lacks them (the policy computes them then).
PrefillView make_prefill_view(const ModelWeights& weights, const KvStore* store,
                              const PrefillCapture& capture, const CaptureRequest& request);

// logic_error naming `policy` when `captured` lacks what `wanted` asks for (the prefill must
// capture the union of its cells' requests).
void check_captures(const PrefillCapture& captured, const CaptureRequest& wanted,
                    const std::string& policy);

}  // namespace kvb
