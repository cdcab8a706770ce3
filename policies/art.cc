// ART, Attention Run-time Termination (seed 003; docs/methods.md §13) — kind E.
//
// Not a cache policy but a change of the decode attention walk: sink block first, then the most
// recent KV block backwards, online softmax; stop once d_scale < tau and d_direction < phi held for
// `patience` consecutive blocks (every head of the KV group). It composes with any policy
// ("full+art", "snapkv+art", "streamingllm+art", "quest+art", ...): it only shortens the walk over
// what that policy kept or selected. Kernel: kernels/cpu/early_exit_decode.h.
// Defaults tau = 1e-5, phi = 1e-3 (seed); patience 2, KV tile 64, sink block 4 are kvbench's
// choices — patience sweeps {1, 2, 4, 8}. scale_criterion (d_scale's reading, default "norm"),
// terms (the paper's ablations) and stop ("group" | "head") select the readings the paper leaves
// open; docs/methods.md §13 says which was chosen and why.
// enabled = false walks every block through the same code (the overhead measurement, p = inf).
// decision_window (default 0 = anywhere) is a cap: W > 0 lets a walk stop only after walk blocks
// 0 .. W-1, on the CPU and the GPU alike. Both engines make the sequential decision over the whole
// walk, so the option is no longer needed for the GPU to stop late; it stays for the ablation and
// for configs that set it.
// oracle_tolerance > 0 also traces every walk against the true relative error of the running
// output (ART Table 4's probe/oracle agreement); the counts land in CachePlan::early_exit_oracle.
#include "common/errors.h"
#include "policies/decode_selector_common.h"
#include "policies/decode_selectors.h"
#include "policies/methods.h"

namespace kvb {

namespace {

nlohmann::json art_defaults() {
  return {{"tau", 1e-5},
          {"phi", 1e-3},
          {"patience", 2},
          {"block_size", 64},
          {"sink_tokens", 4},
          {"scale_criterion", "norm"},
          {"terms", "both"},
          {"stop", "group"},
          {"decision_window", 0},
          {"enabled", true},
          {"oracle_tolerance", 0.0}};
}

}  // namespace

EarlyExitParams make_art_params(const nlohmann::json& params) {
  const PolicyParams reader("art", params, art_defaults());
  EarlyExitParams art;
  art.tau = static_cast<float>(number_at_least(reader, "tau", 0.0));
  art.phi = static_cast<float>(number_at_least(reader, "phi", 0.0));
  art.patience = integer_at_least(reader, "patience", 1);
  art.block_size = integer_at_least(reader, "block_size", 1);
  art.sink_tokens = integer_at_least(reader, "sink_tokens", 0);
  art.scale_criterion = reader.choice("scale_criterion", {"mass", "norm", "change"});
  const std::string terms = reader.choice("terms", {"both", "scale", "direction"});
  art.use_scale = terms != "direction";
  art.use_direction = terms != "scale";
  art.per_head = reader.choice("stop", {"group", "head"}) == "head";
  art.decision_window = integer_at_least(reader, "decision_window", 0);
  art.enabled = reader.boolean("enabled");
  art.oracle_tolerance = static_cast<float>(number_at_least(reader, "oracle_tolerance", 0.0));
  return art;
}

nlohmann::json describe_art_params(const EarlyExitParams& params) {
  return {{"tau", params.tau},
          {"phi", params.phi},
          {"patience", params.patience},
          {"block_size", params.block_size},
          {"sink_tokens", params.sink_tokens},
          {"scale_criterion", params.scale_criterion},
          {"terms", params.use_scale && params.use_direction ? "both"
                    : params.use_scale                       ? "scale"
                                                             : "direction"},
          {"stop", params.per_head ? "head" : "group"},
          {"decision_window", params.decision_window},
          {"enabled", params.enabled},
          {"oracle_tolerance", params.oracle_tolerance}};
}

PolicyFactory art_factory() {
  PolicyFactory factory;
  factory.info = {
      "art", PolicyKind::kKernelWalk,
      "attention run-time termination: stop the decode KV walk once the output is stable",
      "none public (seed 003); criteria reconstructed, docs/methods.md §13", art_defaults()};
  factory.install = [](const nlohmann::json& params, CachePlan& plan) {
    plan.early_exit = make_art_params(params);
  };
  return factory;
}

}  // namespace kvb
