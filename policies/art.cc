// ART, Attention Run-time Termination (seed 003; specs/methods.md §13) — kind E.
//
// Not a cache policy but a change of the decode attention walk: sink block first, then the most
// recent KV block backwards, online softmax; stop once d_scale < tau and d_direction < phi held for
// `patience` consecutive blocks (every head of the KV group). It composes with any policy
// ("full+art", "snapkv+art", "streamingllm+art", "quest+art", ...): it only shortens the walk over
// what that policy kept or selected. Kernel: kernels/cpu/early_exit_attention.h.
// Defaults tau = 1e-5, phi = 1e-3 (seed); patience 2, KV tile 64, sink block 4 and the criteria
// definitions are the harness's reconstruction [UNVERIFIED] — patience sweeps {1, 2, 4, 8}.
// enabled = false walks every block through the same code (the overhead measurement, p = inf).
#include "engine/errors.h"
#include "policies/decode_selector_common.h"
#include "policies/decode_selectors.h"

namespace kvb {

EarlyExitParams make_art_params(const nlohmann::json& params) {
  SelectorParams reader("art", params,
                        {"tau", "phi", "patience", "block_size", "sink_tokens", "scale_criterion",
                         "enabled"});
  EarlyExitParams art;
  art.tau = static_cast<float>(reader.get_double("tau", art.tau, 0.0));
  art.phi = static_cast<float>(reader.get_double("phi", art.phi, 0.0));
  art.patience = reader.get_int("patience", art.patience, 1);
  art.block_size = reader.get_int("block_size", art.block_size, 1);
  art.sink_tokens = reader.get_int("sink_tokens", art.sink_tokens, 0);
  art.scale_criterion = reader.get_string("scale_criterion", art.scale_criterion);
  if (art.scale_criterion != "mass" && art.scale_criterion != "norm")
    throw InputError("art: 'scale_criterion' must be \"mass\" (dZ/Z) or \"norm\" (relative change of "
                     "||o||), got \"" + art.scale_criterion + "\"");
  art.enabled = reader.get_bool("enabled", art.enabled);
  return art;
}

nlohmann::json describe_art_params(const EarlyExitParams& params) {
  return {{"tau", params.tau},
          {"phi", params.phi},
          {"patience", params.patience},
          {"block_size", params.block_size},
          {"sink_tokens", params.sink_tokens},
          {"scale_criterion", params.scale_criterion},
          {"enabled", params.enabled}};
}

}  // namespace kvb
