// The decode-time branch of `kvbench select` (inputs holding q_decode): run a kind-D selector on
// given tensors and report, per layer and KV head, the cache positions attended at that step.
// Per KV head the union of its query heads' selections is reported (for "per_head" GQA modes the
// query heads differ; "shared" modes give one set); dense layers report every position.
// Tensors the policy declares it takes in place of a file parameter (policies/registry.h:
// PolicyFactory::tensor_inputs, e.g. a projection the method would otherwise read from a file)
// are handed to it when the inputs hold them.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/cache_policy.h"
#include "policies/registry.h"

namespace kvb {

struct DecodeSelectInputs {
  int n_layers = 0;
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int length =
      0;  // L cached positions 0..L-1 (the step's own token included, as the engine has it)
  int head_dim = 0;
  const float* keys = nullptr;    // [layers, Hkv, L, d], post-RoPE
  const float* values = nullptr;  // [layers, Hkv, L, d]
  const float* query = nullptr;   // q_decode [layers, Hq, d], post-RoPE
  // By name: the tensors of policy_tensor_inputs(policy) that the inputs hold.
  std::map<std::string, GivenTensor> tensors;
};

// {"selected": [[[positions...] per KV head] per layer], "policy": ..., "params": resolved}.
// Throws InputError for a policy that is not a decode selector or bad shapes.
nlohmann::json select_decode_positions(const std::string& policy, const nlohmann::json& params,
                                       const Budget& budget, const DecodeSelectInputs& inputs);

}  // namespace kvb
