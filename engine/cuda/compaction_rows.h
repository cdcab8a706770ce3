// The row lists of one sequence's compaction on the device (CudaEngine::compact): for every layer,
// the cache rows of the kept entries, then the rows they move to (packed at each head's first
// rows), so that two row copies per layer (kept rows into a scratch, scratch back in place) compact
// all the sequence's heads at once. Host code only: it runs, and is tested, without a GPU.
//
// Why a builder of its own, filling one reused array: a compaction of 30% of a 32K-token prompt
// moves hundreds of thousands of entries per cell, and building their rows through per-layer
// vectors spent far longer on fresh pages and inserts on the host than the device spends copying
// them (results/host-selection.md).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cache_policy.h"

namespace kvb {

struct CompactionRows {
  // Per layer l: layer_count[l] source rows from rows[layer_start[l]], then as many destination
  // rows; after the last layer, 0 .. widest - 1 (the scratch's rows).
  std::vector<int64_t> rows;
  std::vector<int64_t> layer_start, layer_count;
  int64_t widest = 0;  // the most entries any layer keeps (the scratch's height)
};

// Where a sequence's heads live: head h of layer l is slot `l * slots_per_layer + first_slot + h`
// of `head_offset` (its first cache row) and `head_length` (its live entries).
struct SequenceHeads {
  const int64_t* head_offset = nullptr;
  const int32_t* head_length = nullptr;
  int64_t slots_per_layer = 0;
  int64_t first_slot = 0;
  int n_layers = 0;
  int n_kv_heads = 0;
};

// Fills `out` (its arrays keep their capacity from call to call) for `kept`, which must hold
// n_layers x n_kv_heads strictly increasing lists of live entries; throws InputError naming the
// layer and head otherwise, before `out` is used.
void build_compaction_rows(const KeptIndices& kept, const SequenceHeads& heads,
                           CompactionRows& out);

}  // namespace kvb
