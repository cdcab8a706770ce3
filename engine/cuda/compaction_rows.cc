// See compaction_rows.h.
#include "engine/cuda/compaction_rows.h"

#include <algorithm>
#include <string>

#include "common/errors.h"

namespace kvb {

namespace {

[[noreturn]] void refuse(int layer, int head, const std::string& what) {
  throw InputError("compact: kept indices of layer " + std::to_string(layer) + " head " +
                   std::to_string(head) + " " + what);
}

}  // namespace

void build_compaction_rows(const KeptIndices& kept, const SequenceHeads& heads,
                           CompactionRows& out) {
  if (static_cast<int>(kept.size()) != heads.n_layers)
    throw InputError("compact: kept indices must cover every layer (" +
                     std::to_string(kept.size()) + " given, the model has " +
                     std::to_string(heads.n_layers) + ")");
  out.layer_start.assign(heads.n_layers, 0);
  out.layer_count.assign(heads.n_layers, 0);
  out.widest = 0;
  int64_t total = 0;
  for (int l = 0; l < heads.n_layers; ++l) {
    if (static_cast<int>(kept[l].size()) != heads.n_kv_heads)
      refuse(l, 0,
             "cover " + std::to_string(kept[l].size()) + " KV heads, the model has " +
                 std::to_string(heads.n_kv_heads));
    for (const auto& list : kept[l]) out.layer_count[l] += static_cast<int64_t>(list.size());
    out.widest = std::max(out.widest, out.layer_count[l]);
    total += out.layer_count[l];
  }
  out.rows.resize(2 * total + out.widest);
  int64_t* next = out.rows.data();
  for (int l = 0; l < heads.n_layers; ++l) {
    out.layer_start[l] = next - out.rows.data();
    int64_t* src = next;
    int64_t* dst = next + out.layer_count[l];
    for (int h = 0; h < heads.n_kv_heads; ++h) {
      const int64_t slot = l * heads.slots_per_layer + heads.first_slot + h;
      const int64_t base = heads.head_offset[slot];
      const int32_t live = heads.head_length[slot];
      const std::vector<int32_t>& list = kept[l][h];
      int32_t previous = -1;
      for (size_t i = 0; i < list.size(); ++i) {
        const int32_t entry = list[i];
        if (entry <= previous || entry >= live)
          refuse(l, h,
                 "must be strictly increasing live entries (entry " + std::to_string(i) + " is " +
                     std::to_string(entry) + ", after " + std::to_string(previous) + ", of " +
                     std::to_string(live) + " live)");
        previous = entry;
        *src++ = base + entry;
        *dst++ = base + static_cast<int64_t>(i);
      }
    }
    next += 2 * out.layer_count[l];
  }
  for (int64_t i = 0; i < out.widest; ++i) *next++ = i;
}

}  // namespace kvb
