// build_compaction_rows (engine/cuda/compaction_rows.h), the host side of CudaEngine::compact:
// against the row lists written out entry by entry, on a layout whose heads are neither in slot
// order nor equally long. Host code: runs without a GPU.
#include "engine/cuda/compaction_rows.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/errors.h"

namespace kvb {
namespace {

// 3 layers x 2 sequences x 2 KV heads; sequence 1's heads at descending offsets.
struct Layout {
  static constexpr int kLayers = 3, kHeads = 2, kSequences = 2, kCapacity = 100;
  std::vector<int64_t> offset;
  std::vector<int32_t> length;
  Layout() {
    const int slots = kLayers * kSequences * kHeads;
    for (int s = 0; s < slots; ++s) {
      offset.push_back(int64_t(slots - 1 - s) * kCapacity);
      length.push_back(40 + (s * 13) % 60);
    }
  }
  SequenceHeads heads(int seq) const {
    SequenceHeads h;
    h.head_offset = offset.data();
    h.head_length = length.data();
    h.slots_per_layer = kSequences * kHeads;
    h.first_slot = int64_t(seq) * kHeads;
    h.n_layers = kLayers;
    h.n_kv_heads = kHeads;
    return h;
  }
  int64_t slot(int layer, int seq, int head) const {
    return int64_t(layer) * kSequences * kHeads + seq * kHeads + head;
  }
};

// Increasing lists of each head's live entries, some empty, one whole.
KeptIndices random_kept(const Layout& layout, int seq, uint32_t seed) {
  std::mt19937 rng(seed);
  KeptIndices kept(Layout::kLayers, std::vector<std::vector<int32_t>>(Layout::kHeads));
  for (int l = 0; l < Layout::kLayers; ++l)
    for (int h = 0; h < Layout::kHeads; ++h) {
      const int live = layout.length[layout.slot(l, seq, h)];
      const int mode = (l * Layout::kHeads + h + int(seed)) % 4;
      for (int e = 0; e < live; ++e)
        if (mode == 1 || (mode != 0 && rng() % 3 == 0)) kept[l][h].push_back(e);
    }
  return kept;
}

void expect_rows_of(const KeptIndices& kept, const Layout& layout, int seq,
                    const CompactionRows& rows) {
  std::vector<int64_t> want;
  int64_t widest = 0;
  for (int l = 0; l < Layout::kLayers; ++l) {
    std::vector<int64_t> src, dst;
    for (int h = 0; h < Layout::kHeads; ++h) {
      const int64_t base = layout.offset[layout.slot(l, seq, h)];
      for (size_t i = 0; i < kept[l][h].size(); ++i) {
        src.push_back(base + kept[l][h][i]);
        dst.push_back(base + int64_t(i));
      }
    }
    ASSERT_EQ(rows.layer_start[l], int64_t(want.size())) << "layer " << l;
    ASSERT_EQ(rows.layer_count[l], int64_t(src.size())) << "layer " << l;
    widest = std::max<int64_t>(widest, src.size());
    want.insert(want.end(), src.begin(), src.end());
    want.insert(want.end(), dst.begin(), dst.end());
  }
  for (int64_t i = 0; i < widest; ++i) want.push_back(i);
  EXPECT_EQ(rows.widest, widest);
  EXPECT_EQ(rows.rows, want);
}

TEST(CompactionRows, MatchRowsWrittenOutEntryByEntry) {
  const Layout layout;
  CompactionRows rows;
  for (uint32_t seed = 0; seed < 6; ++seed)  // one `rows` reused, longer and shorter in turn
    for (int seq = 0; seq < Layout::kSequences; ++seq) {
      const KeptIndices kept = random_kept(layout, seq, seed * 7 + seq);
      build_compaction_rows(kept, layout.heads(seq), rows);
      expect_rows_of(kept, layout, seq, rows);
    }
}

TEST(CompactionRows, NothingKeptLeavesNoRows) {
  const Layout layout;
  CompactionRows rows;
  build_compaction_rows(random_kept(layout, 1, 1), layout.heads(1), rows);
  const KeptIndices none(Layout::kLayers, std::vector<std::vector<int32_t>>(Layout::kHeads));
  build_compaction_rows(none, layout.heads(1), rows);
  EXPECT_EQ(rows.widest, 0);
  EXPECT_TRUE(rows.rows.empty());
  EXPECT_EQ(rows.layer_count, std::vector<int64_t>(Layout::kLayers, 0));
}

std::string refusal(const KeptIndices& kept, const Layout& layout) {
  CompactionRows rows;
  try {
    build_compaction_rows(kept, layout.heads(0), rows);
  } catch (const InputError& error) {
    return error.what();
  }
  return "accepted";
}

TEST(CompactionRows, RefusesListsThatAreNotIncreasingLiveEntriesNamingLayerAndHead) {
  const Layout layout;
  const KeptIndices good = random_kept(layout, 0, 3);
  KeptIndices repeated = good;
  repeated[2][1] = {3, 3};
  EXPECT_NE(refusal(repeated, layout).find("layer 2 head 1 must be strictly increasing"),
            std::string::npos)
      << refusal(repeated, layout);
  KeptIndices descending = good;
  descending[1][0] = {5, 2};
  EXPECT_NE(refusal(descending, layout).find("layer 1 head 0"), std::string::npos);
  KeptIndices past_end = good;
  past_end[0][1] = {0, layout.length[layout.slot(0, 0, 1)]};
  EXPECT_NE(refusal(past_end, layout).find("layer 0 head 1"), std::string::npos);
  KeptIndices negative = good;
  negative[0][0] = {-1};
  EXPECT_NE(refusal(negative, layout).find("layer 0 head 0"), std::string::npos);
  KeptIndices short_layers(good.begin(), good.begin() + 2);
  EXPECT_NE(refusal(short_layers, layout).find("cover every layer"), std::string::npos);
  KeptIndices missing_head = good;
  missing_head[1].pop_back();
  EXPECT_NE(refusal(missing_head, layout).find("layer 1"), std::string::npos);
  EXPECT_EQ(refusal(good, layout), "accepted");
}

}  // namespace
}  // namespace kvb
