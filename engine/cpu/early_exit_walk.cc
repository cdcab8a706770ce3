#include "engine/cpu/early_exit_walk.h"

namespace kvb {

EarlyExitOptions early_exit_options(const EarlyExitParams& params) {
  EarlyExitOptions options;
  options.tau = params.tau;
  options.phi = params.phi;
  options.patience = params.patience;
  options.block_size = params.block_size;
  options.sink_tokens = params.sink_tokens;
  options.scale_criterion =
      params.scale_criterion == "norm"     ? kernels::EarlyExitScaleCriterion::kNorm
      : params.scale_criterion == "change" ? kernels::EarlyExitScaleCriterion::kChange
                                           : kernels::EarlyExitScaleCriterion::kMass;
  options.use_scale = params.use_scale;
  options.use_direction = params.use_direction;
  options.per_head = params.per_head;
  options.decision_window = params.decision_window;
  options.enabled = params.enabled;
  return options;
}

}  // namespace kvb
