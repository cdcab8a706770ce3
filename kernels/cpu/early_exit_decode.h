// ART decode attention (docs/methods.md §13), CPU reference: an online-softmax walk over KV blocks
// that may stop before the end once the running output is stable.
//
// Walk order: the sink block (entries 0 .. sink_tokens-1) first, so that the dominant sink mass is
// in the normaliser before any test; then blocks of `block_size` entries from the most recent one
// backwards. After block b (b >= 1) with running output o_b = acc_b / Z_b:
//   d_scale     = |‖o_b‖ - ‖o_{b-1}‖| / ‖o_{b-1}‖    ("norm", default: the output's magnitude)
//              or dZ_b / Z_b                         ("mass": the block's share of the normaliser)
//              or ‖o_b - o_{b-1}‖ / ‖o_b‖            ("change")
//   d_direction = 1 - cos(o_b, o_{b-1})
// A head's counter grows when the tested terms are under tau and phi and resets otherwise (the
// ablations test one term only). Group stop (default): the walk stops once every head of the
// group has a counter >= patience after the same block (a GPU CTA holding the packed GQA group can
// only stop when all its heads can); per-head stop: a head whose counter reaches patience keeps
// its output and stops folding, the walk ends when every head has. The comparisons are strict, so
// tau = phi = 0 never stops; enabled = false walks every block through the same code (overhead
// measurement). The paper leaves these definitions open; the readings and the evidence for the
// default are in docs/methods.md §13.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvb::kernels {

// d_scale readings (docs/methods.md §13): kMass = ΔZ_b/Z_b, kNorm = |‖o_b‖ − ‖o_{b−1}‖|/‖o_{b−1}‖,
// kChange = ‖o_b − o_{b−1}‖/‖o_b‖.
enum class EarlyExitScaleCriterion { kMass, kNorm, kChange };

// The stability readings of one head after one walk block b >= 1 (against o_{b-1}).
struct EarlyExitReadings {
  float mass = 0;       // ΔZ_b / Z_b: the share of the running normaliser the block added
  float norm = 0;       // |‖o_b‖ − ‖o_{b−1}‖| / ‖o_{b−1}‖
  float change = 0;     // ‖o_b − o_{b−1}‖ / ‖o_b‖
  float direction = 0;  // 1 − cos(o_b, o_{b−1})
};
float early_exit_scale(const EarlyExitReadings& readings, EarlyExitScaleCriterion criterion);

// Kernel-side mirror of engine/cache_policy.h's EarlyExitParams (kernels are leaves).
struct EarlyExitOptions {
  float tau = 1e-5f;
  float phi = 1e-3f;
  int patience = 2;
  int block_size = 64;
  int sink_tokens = 4;
  EarlyExitScaleCriterion scale_criterion = EarlyExitScaleCriterion::kNorm;
  bool use_scale = true;      // false: d_scale is not tested (the paper's ablation)
  bool use_direction = true;  // false: d_direction is not tested
  bool per_head = false;      // true: each head stops on its own; the walk ends when all have
  // > 0: a cap: a stop may only happen after walk blocks 0 .. decision_window-1 (the GPU walk
  // takes the same option, kernels/cuda/early_exit_decode.h); a walk that would stop later walks
  // every block. 0: anywhere (the method).
  int decision_window = 0;
  bool enabled = true;
};

// Blocks walked and blocks present, summed over calls (one call = one KV-head walk).
struct EarlyExitWalkStats {
  int64_t blocks_visited = 0;
  int64_t blocks_total = 0;
  int64_t walks = 0;
  int64_t walks_stopped_early = 0;
  void add(const EarlyExitWalkStats& other);
  double skipped_fraction() const {
    return blocks_total == 0 ? 0.0 : 1.0 - static_cast<double>(blocks_visited) / blocks_total;
  }
};

// Number of blocks of a walk over n entries.
int early_exit_block_count(int n, const EarlyExitOptions& options);

// One KV group's decode attention: `n_heads` query heads over n entries of one KV head, in store
// order (oldest first). logits = scale * q.k_j (+ logit_bias[j] when given).
struct EarlyExitDecodeArgs {
  const float* queries = nullptr;  // [n_heads, head_dim], post-RoPE
  int n_heads = 1;
  const float* keys = nullptr;        // [n_entries, head_dim]
  const float* values = nullptr;      // [n_entries, head_dim]
  const float* logit_bias = nullptr;  // optional [n_entries]
  int n_entries = 0;
  int head_dim = 0;
  float scale = 0;          // 0 means 1/sqrt(head_dim)
  float* output = nullptr;  // [n_heads, head_dim]
  // Optional [n_heads, n_entries]: the final softmax weights of the visited entries, 0 for the
  // skipped ones (what a decode-eviction policy can see of an early-exit walk).
  float* probabilities = nullptr;
};

// Writes args.output (and probabilities); adds the walk to `stats` when given.
void early_exit_decode(const EarlyExitDecodeArgs& args, const EarlyExitOptions& options,
                       EarlyExitWalkStats* stats);

// Oracle comparison for one walk (ART Table 4): the same walk without stopping, with the true
// relative L2 error ||o_b - o_full|| / ||o_full|| (max over the group) after every block.
struct EarlyExitOracleTrace {
  int blocks_total = 0;
  std::vector<float> relative_error;  // after block b
  std::vector<bool> probe_says_stop;  // every head's counter >= patience after block b
  int probe_stop_block = -1;          // first block where the probe stops (-1: never)
  int oracle_stop_block = -1;         // first block with relative_error < tolerance (-1: never)
  // First block from which relative_error stays < tolerance to the end: the earliest stop a
  // perfect probe could make (-1: never; the error can rise again after oracle_stop_block).
  int safe_stop_block = -1;
};
EarlyExitOracleTrace early_exit_oracle_trace(const EarlyExitDecodeArgs& args,
                                             const EarlyExitOptions& options, float tolerance);

// Agreement of probe and oracle over many walks: per block boundary (probe says stop vs the true
// error is under the tolerance) and per walk (the probe's stop came while the error was still at or
// above the tolerance: a premature stop).
struct EarlyExitOracleSummary {
  int64_t walks = 0;
  int64_t probe_stops = 0;
  int64_t premature_stops = 0;  // stopped while relative_error >= tolerance
  int64_t boundaries = 0;
  int64_t agreements = 0;
  int64_t false_positives = 0;            // probe stops, oracle says the error is still too large
  int64_t false_negatives = 0;            // probe continues, oracle says the error is already small
  double relative_error_at_stop_sum = 0;  // over the walks that stopped
  // Blocks of all walks, and those after each walk's safe_stop_block: the fraction a perfect
  // probe at this tolerance could skip (what ART's probe could gain at best).
  int64_t blocks = 0;
  int64_t safely_skippable_blocks = 0;
  double safely_skippable_fraction() const {
    return blocks == 0 ? 0.0 : static_cast<double>(safely_skippable_blocks) / blocks;
  }
  void add(const EarlyExitOracleTrace& trace, float tolerance);
  void add(const EarlyExitOracleSummary& other);
};

// Every reading of a walk that never stops (kvbench art-trace; docs/methods.md §13). Block b,
// head a: readings[b * n_heads + a] (block 0 has no previous output: zeros), error = the true
// relative error ‖o_b − o_full‖ / ‖o_full‖ of the head's running output, mass_share = the
// block's share of the head's full softmax mass.
struct EarlyExitWalkTrace {
  int n_heads = 0;
  int blocks = 0;
  std::vector<EarlyExitReadings> readings;
  std::vector<float> error;
  std::vector<float> mass_share;
  size_t at(int block, int head) const { return static_cast<size_t>(block) * n_heads + head; }
};
EarlyExitWalkTrace early_exit_walk_trace(const EarlyExitDecodeArgs& args,
                                         const EarlyExitOptions& options);

// Where the stability test of `options` stops on a traced walk: blocks the walk visits (as
// early_exit_decode counts them) and, per head, the last block folded into its output.
struct EarlyExitStop {
  int visited = 0;
  std::vector<int> head_last_block;
};
EarlyExitStop early_exit_stop(const EarlyExitWalkTrace& trace, const EarlyExitOptions& options);

}  // namespace kvb::kernels
