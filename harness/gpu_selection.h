// Decode selectors (kind D) on the GPU engine: the CPU selector's resolved parameters
// (DescribedDecodeSelector::describe(), policies/decode_selectors.h) as the engine's
// SparseDecodeConfig, so that `kvbench bench` and the tests run the GPU path with exactly the
// parameters the CPU selector would use.
#pragma once

#include "engine/cache_policy.h"
#include "engine/cuda/sparse_decode_config.h"
#include "policies/binarypc_projection.h"

namespace kvb {

// Whether the GPU engine selects for this policy name ("binarypc", "quest").
bool gpu_selects_for(const std::string& policy_name);

// The config of `selector` (binarypc or quest; InputError for others) at `budget_tokens`.
// BinaryPC's projection comes from `projection` when given, else from the selector's "projection"
// file; it stays empty for an online fit (the GPU engine does not fit projections: the caller
// supplies rows).
SparseDecodeConfig gpu_selection_config(const DecodeSelector& selector, int budget_tokens,
                                        const BinaryProjectionSet* projection = nullptr);

}  // namespace kvb
