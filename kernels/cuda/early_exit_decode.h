// ART decode attention on the GPU (docs/methods.md §13). CPU twin and the meaning of every
// quantity: kernels/cpu/early_exit_attention.h. Test: tests/cuda/early_exit_decode_test.cc.
// Benchmark: tests/benchmarks/cuda_art_bench.cc.
//
// The walk of one *walker* (dense: a sequence's KV head with its packed GQA group; index lists:
// one query head over its own list) is the CPU walk: walk block 0 is the sink block (entries
// 0 .. sink_tokens-1), then blocks of 64 entries from the most recent backwards (block i >= 1 holds
// entries [max(sinks, n - 64 i), n - 64 (i - 1))). In index mode the entries are the list's, in
// the order given (pass them in store order, as the CPU engine gathers them).
//
// Semantics on the GPU: split-KV in walk order, the recent split decides.
//   The walk's blocks are cut into splits of consecutive walk blocks; thread block (split c,
//   walker) folds its blocks recent-first with its own online softmax, and a merge kernel combines
//   the splits (flash-decoding). Split 0 — the sink block and the W-1 most recent blocks, W =
//   decider_blocks, the decision window — is the *decider*: after every block it runs the exact
//   CPU stability test (d_scale by mass, norm or change, d_direction, per-head counters, the group
//   stops only when every head's counter >= patience) on the running output o_b = acc_b / Z_b. The
//   other splits hold chunk_blocks blocks each. When the decider stops at walk block s it
//   publishes that in the walker's stop word; the other splits poll the word once per tile and
//   stop prefetching and computing one or two tiles later, and the merge uses the decider alone.
//   The saving is therefore the work the other splits had not yet done when the decider stopped:
//   large when the cache is long (many tiles per split), none when every split holds one or two
//   tiles (short caches at batch 1). So the output and blocks_visited equal the CPU walk's
//   whenever the CPU walk stops at a block < W; when the CPU walk would stop later (or never) the
//   GPU walk does not stop and returns full attention over all blocks. The test compares exactly
//   that. Why not the CPU's sequential decision over the whole walk: the stop test after block b
//   depends on the merged state of every earlier block, so deciding beyond split 0 means either
//   one thread block per walker (8 of 132 SMs busy at B = 1) or splits waiting on each other in a
//   chain, and both cost far more than the 2% the overhead target allows when nothing stops.
// Automatic layout (chunk_blocks = decider_blocks = 0): the plain kernel's split count S and
//   chunk C (as many thread blocks per SM as fit at once over all walkers, in dense mode no more);
//   the decider gets a quarter of C (its per-block merge and test make its blocks slower, and the
//   slowest split is the kernel's time), the others keep C, one split more than the plain kernel,
//   unless that extra thread block per walker would not fit the resident slots: then the others
//   stretch over S - 1 splits. At Llama-3.1-8B shapes, batch 1: 4K: W 1, C 2 (no stop is
//   possible: patience 2 needs 3 blocks); 32K: W 4, C 16; 128K: W 16, C 64 (cuda_art_bench prints
//   the layout).
// Prefetch: every thread block keeps two tiles in flight ahead of the one it computes (as the
//   plain kernel), so the decider has loaded up to two blocks past its stop block, never folded
//   in; the `loaded` statistic counts every tile any thread block fetched, including those. In
//   dense mode each split's first tile leaves before the wait for the previous kernel (launch.cuh)
//   when its rows are settled, as decode_attention's; if the length read after the wait differs,
//   the copy is dropped and fetched again.
// The step's append (attention.append, dense walks): as decode_attention's, the walk writes the new
//   token's K/V row (the split holding the most recent block, or the sink block while the cache
//   is within the sinks) and rotates the queries itself; the merge advances the length.
// enabled = false runs the same code (the decider still runs the test after every block) and never
//   publishes a stop: the overhead measurement.
// Layout inside a thread block: decode_mma_kernel's — 4 warps, each owning 16 keys of every tile
//   with its own online softmax (the group's query heads are rows of an m16n8k16 tile), merged at
//   the end. Only the decider merges the warps after every block too (through the tile's shared
//   memory, once every warp is done with it) to run the test; the other splits do exactly the
//   plain kernel's work plus one read of the stop word per tile (decider and others are separate
//   instantiations of the walk, so the others keep the query in registers as the plain kernel).
//   (A first version in which every warp computed all 64 logits and a quarter of P·V, so the test
//   needed no merge, was much slower than decode_attention with termination off.)
// Cost with termination off (cuda_art_bench, a whole call, walk + merge, against decode_attention
//   in the same run): a few percent at 32K and 128K, more at 4K (window 1: no stop possible); part
//   of it at 32K is layout (the walk's separate sink block needs one split more than the plain
//   kernel's 32). In the engine both kernels run 33 splits at 32K (the cache has room for the
//   steps to come). Figures: results/gpu-kernel-tuning.md §7.4-7.5.
// Limits: head_dim 64 or 128, KV block 64 (the tile), GQA group <= 8, sink_tokens <= 64.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.h"

namespace kvb::cuda {

constexpr int kEarlyExitBlock = 64;  // KV entries per walk block (the kernel's tile)

// d_scale as the CPU walk's EarlyExitScaleCriterion (kernels/cpu/early_exit_attention.h): dZ/Z,
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
  bool enabled = true;
};

// Per-walker words of walker_state (int32). Zero the buffer once when it is allocated; after that
// no call needs a reset (nothing extra in a decode graph): the stop word is tagged with the
// walker's call epoch, which the merge kernel advances.
enum EarlyExitStateWord {
  kStopWord = 0,       // during a call: epoch + 1 once the decider stopped (polled by the splits)
  kBlocksVisited = 1,  // after a call: blocks folded into the output (the CPU walk's `visited`)
  kBlocksTotal = 2,    // after a call: blocks of the whole walk
  kBlocksLoaded = 3,   // after a call: tiles fetched by all thread blocks of the walker (the work)
  kLoadedScratch = 4,  // during a call: tiles fetched so far
  kEpoch = 5,          // calls completed
  kStopResult = 6,     // written by the decider every call: 0 no stop, s + 1 stopped after block s
  kStateWords = 7,
};

struct EarlyExitDecodeArgs {
  // q/k/v/kv_offset/kv_length/indices/out/... exactly as for decode_attention; `workspace` must
  // hold early_exit_decode_workspace_floats(...) floats. `chunk_size` is ignored (chunk_blocks).
  DecodeAttentionArgs attention;
  EarlyExitDecodeOptions options;
  int32_t* walker_state = nullptr;         // device [early_exit_walkers(attention) * kStateWords]
  unsigned long long* totals = nullptr;    // optional device [3]: visited, total, loaded, summed
  int chunk_blocks = 0;    // walk blocks per split after the decider; 0 = the plain kernel's chunk
  int decider_blocks = 0;  // walk blocks of the decider split (the decision window); 0 = automatic:
                           // chunk_blocks when that is given, else a share of the automatic chunk
};

// Dense: batch * n_kv_heads walkers; index lists: batch * n_query_heads.
int early_exit_walkers(const DecodeAttentionArgs& args);
// Blocks of a walk over n entries (sink block + 64-entry blocks), as the CPU's count.
int early_exit_walk_blocks(int n, int sink_tokens);
size_t early_exit_decode_workspace_floats(int batch, int n_query_heads, int head_dim, int max_kv_length);
// The layout a call with these arguments uses: walk blocks per split after the decider, the
// decider's blocks (the decision window), and the number of splits.
int early_exit_chunk_blocks(const EarlyExitDecodeArgs& args);
int early_exit_decider_blocks(const EarlyExitDecodeArgs& args);
int early_exit_splits(const EarlyExitDecodeArgs& args);
// Launches the walk and the merge on `stream` (two kernels; graph-capturable).
void early_exit_decode(const EarlyExitDecodeArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
