// Shared pieces of the kind-D decode selectors (TOPK, Quest, MagicPIG, BinaryPC): parameter
// reading with clear errors, dense layers, GQA modes and top-k over scores.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cache_policy.h"

namespace kvb {

// How a KV group's query heads share a selection (specs/methods.md §10, §14):
//   kPerHead - each query head picks its own set (the union is loaded; exact reference semantics)
//   kShared  - one set per KV head, scored over the whole group
enum class GqaSelection { kPerHead, kShared };

// Reads and validates one selector's parameters; every key must be known.
class SelectorParams {
 public:
  SelectorParams(std::string method, const nlohmann::json& params, std::set<std::string> known);

  int get_int(const std::string& key, int fallback, int minimum) const;
  double get_double(const std::string& key, double fallback, double minimum) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<int> get_layers(const std::string& key, const std::vector<int>& fallback) const;
  GqaSelection get_gqa(GqaSelection fallback) const;

 private:
  std::string method_;
  nlohmann::json params_;
};

const char* gqa_selection_name(GqaSelection mode);

// Tokens a selector may attend to at a step with `current_length` cached entries: fractions apply
// to the current length, token counts are fixed; at least 1, at most the current length.
int selection_budget(const Budget& budget, int current_length);

// Indices of the k largest scores (ties: the lower index first), in increasing index order.
std::vector<int32_t> top_k_indices(const float* scores, int n, int k);

// True when `layer` is one of `dense_layers`.
bool is_dense_layer(const std::vector<int>& dense_layers, int layer);

// Throws InputError when `out.indices` was not sized to the caller's query-head count, or the
// count is not a multiple of the store's KV heads.
int checked_query_heads(const Selection& out, const KvStore& store, const std::string& method);

}  // namespace kvb
