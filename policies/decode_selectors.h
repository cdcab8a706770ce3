// Direct constructors of the kind-D decode selectors and the kind-E ART modifier (docs/methods.md
// §10-14), for tests and `kvbench select`; the registry's factories (policies/methods.h) call them.
// Each reads its JSON parameters (unknown keys and bad values are InputErrors). `describe()` gives
// the resolved parameters, defaults included, so that a run records e.g. the GQA semantics used.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "engine/cache_policy.h"
#include "policies/binarypc_projection.h"

namespace kvb {

class PlanFiles;

// A DecodeSelector that can say which parameters it runs with.
class DescribedDecodeSelector : public DecodeSelector {
 public:
  virtual nlohmann::json describe() const = 0;
};

// TOPK oracle (§14): exact top-k logits per step. Params: dense_layers [0,1], gqa "per_head".
std::shared_ptr<DescribedDecodeSelector> make_topk_selector(const nlohmann::json& params,
                                                            const Budget& budget);
// Quest (§10): pages with min/max bounds. Params: page_size 16, min_pages 3, dense_layers [0,1],
// gqa "per_head", keep_last_page false.
std::shared_ptr<DescribedDecodeSelector> make_quest_selector(const nlohmann::json& params,
                                                             const Budget& budget);
// MagicPIG (§11): LSH sampling with importance weights. Params: K 10, L 150, threshold 2,
// sinks 4, local 64, dense_layers [0,16], seed 0. The budget does not apply (data-dependent).
std::shared_ptr<DescribedDecodeSelector> make_magicpig_selector(const nlohmann::json& params,
                                                                const Budget& budget);
// BinaryPC (§12). Params: bits 64, eas true, err_ratio 0.1, dense_layers [0,1], projection
// (path of a `kvbench calibrate` file; online fit when absent), iterations 4, seed 0.
// `projection` given here overrides the file, and so does a "bpc_projection" tensor given through
// `files` (`kvbench select`'s inputs; PolicyFactory::tensor_inputs); else the file is read through
// `files` when given (once per sweep), else read here.
std::shared_ptr<DescribedDecodeSelector> make_binarypc_selector(
    const nlohmann::json& params, const Budget& budget,
    std::shared_ptr<const BinaryProjectionSet> projection = nullptr, PlanFiles* files = nullptr);

// ART (§13): the early-exit parameters. Params: tau 1e-5, phi 1e-3, patience 2, block_size 64,
// sink_tokens 4, scale_criterion "norm" | "mass" | "change", terms "both" | "scale" | "direction",
// stop "group" | "head", decision_window 0 (anywhere; W > 0: a cap, stops only after blocks < W),
// enabled true, oracle_tolerance 0 (off).
EarlyExitParams make_art_params(const nlohmann::json& params);
nlohmann::json describe_art_params(const EarlyExitParams& params);

}  // namespace kvb
