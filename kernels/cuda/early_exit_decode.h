// ART decode attention on the GPU (docs/methods.md §13). CPU twin and the meaning of every
// quantity: kernels/cpu/early_exit_decode.h. Test: tests/cuda/early_exit_decode_test.cc.
// Benchmark: tests/benchmarks/cuda_art_bench.cc.
//
// The walk of one *walker* (dense: a sequence's KV head with its packed GQA group; index lists:
// one query head over its own list) is the CPU walk: walk block 0 is the sink block (entries
// 0 .. sink_tokens-1), then blocks of 64 entries from the most recent backwards (block i >= 1 holds
// entries [max(sinks, n - 64 i), n - 64 (i - 1))). In index mode the entries are the list's, in
// the order given (pass them in store order, as the CPU engine gathers them).
//
// Semantics: the CPU's sequential decision over the whole walk. The stop block and the output
// are those of the CPU walk with the same options (decision_window included, which is now only a
// cap: 0 = a stop may come after any block, as the method; W > 0 = only after blocks 0 .. W-1).
//
// How (two kernels, no thread block ever waits on another, so no deadlock whatever the grid):
// 1. The walk (split-KV in walk order, as the plain kernel's flash-decoding): thread block
//    (chunk c, walker) folds walk blocks [c C, (c+1) C) recent-first with the online softmax, and
//    after every walk block b writes its running state R_b (max, sum, the block's own mass, the
//    unnormalised accumulator, per query head) to the workspace — the flash-decoding partial of
//    blocks cC .. b. The last thread block of a *segment* (G consecutive chunks) to finish (an
//    arrival counter per walker and segment) folds the segment's chunk finals into its aggregate.
// 2. The decision: thread block (segment j, walker) folds the aggregates of segments < j into the
//    prefix P (the state after every block before the segment), then walks its blocks in order:
//    the state after block b is S_b = P (+) R_b, where P moves to S_b at every chunk end; from
//    o_b = S_b / Z_b and o_{b-1} it computes the CPU's readings (d_scale by mass, norm or change,
//    d_direction, the same float formulas as the CPU's) and whether each head passes. A block's
//    output o_b is kept (in the workspace) where every head could stop there. Each segment sums
//    its verdicts up (passes at its start and its end, its first run of `patience` passes); the
//    last decide block of the walker (arrival counter) chains the summaries in walk order into
//    the first block where every head has passed `patience` blocks in a row (the CPU's counters,
//    group stop), and writes that block's output (else the last block's) and the statistics.
// The merges are associative, so S_b equals the sequential per-block fold up to float rounding
// (the order of the additions differs, as it does between any two flash-decoding layouts; the
// GPU's P.V products round P to bf16 anyway, which no layout can make equal to the CPU's).
//
// Why not stop the KV stream itself at the stop: the decision after block b needs the merged
// state of every earlier block, so deciding while the walk streams needs the earlier blocks done
// first: either one thread block per walker walking serially (the previous version, whose decider
// split made full+art several times slower than the plain kernel end to end: results/gpu-sweeps.md)
// or thread blocks waiting on each other, and in one wave of resident blocks (what fills the GPU at
// batch 1) every block is done at about the same time anyway. So the walk always streams every tile
// (`loaded` = the total) and the stop changes the output and blocks_visited only; what ART costs
// over the plain kernel is the per-block partial (a merge of the 4 warps through shared memory and
// 2 D + 4 floats written per head and block) and the decision kernel. What stopping the stream
// could save at most: the blocks the stops skip, 0.5-6.7% on Qwen2.5-Coder-0.5B at 4-32K with
// decision_window 128 (results/reproduction-qwen2.5-coder-0.5b.md).
//
// Layout: the walk's chunk C is the plain kernel's (as many thread blocks per SM as fit at once
//   over all walkers, in dense mode no more); a segment is a multiple of C near 16 walk blocks (at
//   most kMaxSegments per walk). Both can be forced (chunk_blocks, segment_blocks) for tests.
// The walk's tiles: decode_mma_kernel's — 4 warps, each owning 16 keys of every tile with its own
//   online softmax (the group's query heads are rows of an m16n8k16 tile), a ring of 3 tiles (two
//   in flight while one is computed). After every tile the warps' states are merged through the
//   tile's shared memory (free once every warp is done with it) into R_b.
// Prefetch of the first tile before the wait for the previous kernel (launch.cuh), dense walks: as
//   decode_attention's, when its rows are settled; if the length read after the wait differs, the
//   copy is dropped and fetched again.
// The step's append (attention.append, dense walks): as decode_attention's, the walk writes the new
//   token's K/V row (the chunk holding the most recent block, or the sink block while the cache
//   is within the sinks) and rotates the queries itself; the last decide block advances the length.
// enabled = false runs the same code (the readings and verdicts of every block) and never stops:
//   the overhead measurement.
// CUDA graphs: launch shapes depend on max_kv_length only; the counters are reset by the thread
//   block that sees the last arrival, so no call needs a reset (zero walker_state once).
// Limits: head_dim 64 or 128, KV block 64 (the tile), GQA group <= 8, sink_tokens <= 64.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.h"

namespace kvb::cuda {

constexpr int kEarlyExitBlock = 64;  // KV entries per walk block (the kernel's tile)
constexpr int kMaxSegments = 64;     // decision segments per walk (arrival counters per walker)

// d_scale as the CPU walk's EarlyExitScaleCriterion (kernels/cpu/early_exit_decode.h): dZ/Z,
// |‖o_b‖-‖o_{b-1}‖|/‖o_{b-1}‖ or ‖o_b-o_{b-1}‖/‖o_b‖. d_direction = 1 - cos(o_b, o_{b-1}), computed
// as the CPU does from ‖o_b‖², ‖o_{b-1}‖² and ‖o_b-o_{b-1}‖².
enum class EarlyExitScale : int { kMass = 0, kNorm = 1, kChange = 2 };

struct EarlyExitDecodeOptions {
  float tau = 1e-5f;
  float phi = 1e-3f;
  int patience = 2;
  int sink_tokens = 4;
  EarlyExitScale scale_criterion = EarlyExitScale::kNorm;
  bool use_scale = true;      // false: d_scale not tested (ablation)
  bool use_direction = true;  // false: d_direction not tested (ablation)
  // > 0: a stop may only come after walk blocks 0 .. decision_window-1 (the CPU option's meaning);
  // 0: anywhere.
  int decision_window = 0;
  bool enabled = true;
};

// Per-walker words of walker_state (int32). Zero the buffer once when it is allocated; every call
// leaves the counters at zero again.
enum EarlyExitStateWord {
  kDecideArrivals = 0,   // during a call: decide blocks done (the last one finishes the walker)
  kBlocksVisited = 1,    // after a call: blocks folded into the output (the CPU walk's `visited`)
  kBlocksTotal = 2,      // after a call: blocks of the whole walk
  kBlocksLoaded = 3,     // after a call: tiles fetched (every block: the walk streams them all)
  kSegmentArrivals = 4,  // [kMaxSegments] during a call: walk blocks done per segment
  kStateWords = kSegmentArrivals + kMaxSegments,
};

struct EarlyExitDecodeArgs {
  // q/k/v/kv_offset/kv_length/indices/out/... exactly as for decode_attention; `workspace` must
  // hold early_exit_decode_workspace_floats(...) floats. `chunk_size` is ignored (chunk_blocks).
  DecodeAttentionArgs attention;
  EarlyExitDecodeOptions options;
  int32_t* walker_state = nullptr;       // device [early_exit_walkers(attention) * kStateWords]
  unsigned long long* totals = nullptr;  // optional device [3]: visited, total, loaded, summed
  int chunk_blocks = 0;                  // walk blocks per walk split; 0 = the plain kernel's chunk
  int segment_blocks = 0;  // walk blocks per decision segment (rounded up to a multiple of the
                           // chunk, and up to what kMaxSegments segments need); 0 = automatic
};

// Dense: batch * n_kv_heads walkers; index lists: batch * n_query_heads.
int early_exit_walkers(const DecodeAttentionArgs& args);
// Blocks of a walk over n entries (sink block + 64-entry blocks), as the CPU's count.
int early_exit_walk_blocks(int n, int sink_tokens);
size_t early_exit_decode_workspace_floats(int batch, int n_query_heads, int head_dim,
                                          int max_kv_length);
// The layout a call with these arguments uses: walk blocks per split and per decision segment,
// and the number of splits and segments (the two kernels' grids along x).
int early_exit_chunk_blocks(const EarlyExitDecodeArgs& args);
int early_exit_splits(const EarlyExitDecodeArgs& args);
int early_exit_segment_blocks(const EarlyExitDecodeArgs& args);
int early_exit_segments(const EarlyExitDecodeArgs& args);
// Launches the walk and the decision on `stream` (two kernels; graph-capturable).
void early_exit_decode(const EarlyExitDecodeArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
