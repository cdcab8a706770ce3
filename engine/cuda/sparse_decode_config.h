// The parameters of decode-time selection (kind D) on the GPU engine: BinaryPC and Quest, as the
// CPU selectors define them (policies/binarypc.cc, policies/quest.cc). Plain C++ (no CUDA types)
// so that the harness can fill it from a policy's resolved parameters.
#pragma once

#include <vector>

namespace kvb {

struct SparseDecodeConfig {
  enum class Method { kBinaryPc, kQuest };
  Method method = Method::kBinaryPc;
  int token_budget = 2048;                 // BinaryPC: k (capped at the prompt); Quest: B
  std::vector<int> dense_layers = {0, 1};  // these layers attend to everything

  // BinaryPC: P [n_layers, Hkv, 64, head_dim] shared by every sequence, or
  // [batch, n_layers, Hkv, 64, head_dim] (one online fit per prompt). Rows of dense layers unused.
  std::vector<float> projection;
  bool eas = true;         // error-aware safeguard: err_k largest reconstruction errors forced
  double err_ratio = 0.1;  // err_k = min(max(int(err_ratio * k), 1), L)

  // Quest.
  int page_size = 16;
  int min_pages = 3;
  bool shared_pages = false;    // gqa "shared" (max over the group) instead of "per_head"
  bool keep_last_page = false;  // the cache's last page always inside the page budget

  // Keep each selecting layer's last decode query (tests compare with the CPU selector).
  bool record_queries = false;
};

}  // namespace kvb
