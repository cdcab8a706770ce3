// A decode-time selection (kind D) as the generic operations a device engine runs inside its decode
// step: score the cached entries, keep the best per list (top-k), gather them into the index-list
// attention; or sample entries by hash collisions, each with an importance weight (LSH sampling). A
// selector (policies/) fills this from its own parameters (DecodeSelector::device_selection); the
// engine reads only these building blocks and never learns which method asked for them. Plain C++
// so that the policy layer can build it without CUDA.
#pragma once

#include <functional>
#include <memory>
#include <vector>

namespace kvb {

struct DeviceSelectionSpec {
  // What ranks the cached entries of a (layer, head) at a decode step.
  enum class Scores {
    // 64-bit sign codes of the prompt's keys under a projection [64, d] per (layer, KV head); the
    // group's projected queries are quantised to bit-planes (one scale per group) and every prompt
    // key gets the exact integer dot product of code and planes, maximised over the group. Entries
    // appended after the prompt are never coded: they join every list after the k chosen prompt
    // entries, k = min(budget, prompt length). One list per KV head serves its whole group.
    kSignCodes,
    // Pages of page_size entries, aligned from the first, with the elementwise minimum and maximum
    // of their keys; a page scores sum_i max(q_i min_i, q_i max_i) >= q.k of any of its keys.
    // With B = min(T, budget) of the T cached entries, n = min(max(min_pages, B / page_size),
    // pages present) pages are kept, each whole.
    kPageBounds,
    // The exact q.k of every cached entry per query head; the budget's best entries are kept.
    kExactDot,
    // No ranking and no budget: per (layer, KV head) the prompt's middle entries (all but the
    // first exact_first and the last exact_last) are centred on their mean and hashed into L
    // tables of K sign bits after prefill; at each step every query head keeps the middle entries
    // whose codes equal its own in at least min_collisions tables, each with the logit bias
    // -log(u + 1e-4), u its collision probability from cos(q, k - mean)
    // (kernels/cpu/lsh_sampling.h), plus the exact entries and every entry appended after the
    // prompt (bias 0). One list per query head; its length depends on the data.
    kLshSampling,
  };
  Scores scores = Scores::kExactDot;

  // Entries kept per list at a step with T cached entries: budget_tokens, or, when
  // budget_fraction > 0, int(budget_fraction * T); clamped to [1, T] (kExactDot, kPageBounds's B).
  int budget_tokens = 2048;
  double budget_fraction = 0;
  std::vector<int> dense_layers = {0, 1};  // these layers attend to everything
  // One list per KV head from the group's maximum score (true), or one list per query head.
  // kSignCodes always shares.
  bool shared_group = false;

  struct SignCodes {
    // [n_layers, Hkv, 64, d] shared by every sequence, or [batch, n_layers, Hkv, 64, d] (one set
    // of rows per sequence). Rows of dense layers are unused. Empty: fitted on the device (below).
    std::vector<float> projection;
    // Without rows: the rows fitted on the device to the first sequence's prompt keys by
    // binary_fit_projection (kernels/cuda/binary_hash.h) from these start vectors, one set per
    // (layer, KV head), [n_layers, Hkv, 64, d], and shared by the batch (its sequences replay one
    // prompt).
    struct Fit {
      int iterations = 4;
      bool recompute_signs = false;
      std::vector<float> starts;
    } fit;
    // Whether the prompt entries whose keys the codes reconstruct worst, ||k - sum_i h_i P_i||,
    // are always kept (inside k): min(max(int(forced_error_ratio * k), 1), prompt length) of them.
    bool force_worst_reconstructed = false;
    double forced_error_ratio = 0.1;
  } sign_codes;

  struct Pages {
    int page_size = 16;
    int min_pages = 3;
    bool keep_last_page = false;  // the cache's last page always counts inside the page budget
  } pages;

  struct LshSampling {
    int bits_per_table = 10;  // K, at most 16
    int tables = 150;         // L
    int min_collisions = 2;
    int exact_first = 4;  // prompt entries [0, exact_first) are attended exactly
    int exact_last = 64;  // so are the prompt's last exact_last entries
    // The rows [K * L, d] of (layer, KV head) for head dimension d; (layer, head) pairs given the
    // same pointer share one device copy. Called once per selecting (layer, KV head) at start.
    std::function<std::shared_ptr<const std::vector<float>>(int layer, int kv_head, int d)>
        projection;
  } lsh_sampling;

  // Keep each selecting layer's last decode query (tests compare the lists with a CPU twin).
  bool record_queries = false;
};

}  // namespace kvb
