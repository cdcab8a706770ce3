// KeyDiff (Park et al. 2025) — kind B, no attention weights needed.
//
//   μ = mean_j (k_j / ‖k_j‖) over the candidates,   s_j = −cos(k_j, μ)   (keep the most distinct)
//
// Block-wise as in the paper and kvpress's BlockPress: kept = the first n_kept tokens; for each
// block [n_kept + iB, n_kept + (i+1)B) the candidates are kept ∪ block, μ is recomputed over them
// and the top n_kept survive. This simulates chunked prefill after one full forward pass (later
// chunks saw the uncompressed cache), as kvpress does.
// Source: kvpress @8bb29b9 `keydiff_press.py`, `block_press.py` (docs/methods.md §5); official
// repository not read. Defaults: block_size 128 (B ≥ L means one block). Budget: n_kept per
// (layer, KV head), nothing protected. `score()` (used when wrapped by AdaKV) is the one-shot score
// over all keys.
#include <algorithm>
#include <cmath>

#include "policies/methods.h"
#include "policies/scored_policy.h"
#include "policies/selection.h"

namespace kvb {
namespace {

// −cos(k_j, μ) for the candidate positions, μ their mean unit key.
std::vector<float> keydiff_scores(const float* keys, int d,
                                  const std::vector<int32_t>& candidates) {
  std::vector<double> anchor(d, 0.0);
  std::vector<float> norms(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    const float* k = keys + static_cast<int64_t>(candidates[c]) * d;
    double squared = 0;
    for (int i = 0; i < d; ++i) squared += double(k[i]) * k[i];
    norms[c] = static_cast<float>(std::sqrt(squared));
    for (int i = 0; i < d; ++i) anchor[i] += k[i] / std::max(norms[c], 1e-12f);
  }
  double anchor_norm = 0;
  for (int i = 0; i < d; ++i) anchor_norm += anchor[i] * anchor[i];
  anchor_norm = std::max(std::sqrt(anchor_norm), 1e-12);
  std::vector<float> scores(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    const float* k = keys + static_cast<int64_t>(candidates[c]) * d;
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += k[i] * anchor[i];
    scores[c] = static_cast<float>(-dot / (std::max(double(norms[c]), 1e-12) * anchor_norm));
  }
  return scores;
}

class KeyDiffPolicy : public ScoredPolicy {
 public:
  KeyDiffPolicy(ScoredSettings settings, int block_size)
      : ScoredPolicy(std::move(settings)), block_size_(block_size) {}

  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    std::vector<std::vector<float>> scores(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h)
      scores[h] = keydiff_scores(layer.keys[h], layer.head_dim, keep_all(layer.length));
    return scores;
  }

 protected:
  std::vector<std::vector<int32_t>> select_layer(const LayerPrefillView& layer,
                                                 int n_kept) const override {
    const int length = layer.length;
    const int block = std::min(block_size_, length);
    std::vector<std::vector<int32_t>> kept(layer.n_kv_heads);
    for (int h = 0; h < layer.n_kv_heads; ++h) {
      std::vector<int32_t> current = keep_all(n_kept);
      for (int start = n_kept; start < length; start += block) {
        std::vector<int32_t> candidates = current;
        for (int j = start; j < std::min(start + block, length); ++j) candidates.push_back(j);
        const auto scores = keydiff_scores(layer.keys[h], layer.head_dim, candidates);
        current.clear();
        // Candidates are increasing (the kept, then the block's later positions), so the set in
        // index order keeps `current` sorted.
        for (int32_t c : top_k_set(scores, n_kept)) current.push_back(candidates[c]);
      }
      kept[h] = current;
    }
    return kept;
  }

 private:
  int block_size_;
};

}  // namespace

PolicyFactory keydiff_factory() {
  return scored_factory({"keydiff",
                         PolicyKind::kPrefillQueryAgnostic,
                         "keep keys least similar to the mean key direction (block-wise)",
                         "kvpress@8bb29b9 keydiff_press.py, block_press.py",
                         {{"block_size", 128}, {"dense_layers", nlohmann::json::array()}}},
                        [](const PolicyParams& params) {
                          const int block_size = params.integer("block_size");
                          if (block_size < 1)
                            throw InputError("parameter 'block_size' of keydiff must be >= 1");
                          return std::make_shared<KeyDiffPolicy>(
                              read_scored_settings(params, PolicyKind::kPrefillQueryAgnostic),
                              block_size);
                        });
}

}  // namespace kvb
