// StreamingLLM (Xiao et al. 2024) — kind B, prefill port.
//
//   keep positions [0, s) ∪ [L − r, L),   r = n_kept − s
//
// Source: mit-han-lab/streaming-llm (`streaming_llm/kv_cache.py`, StartRecentKVCache), and the
// benchmark ports kvpress `streaming_llm_press.py` / KVCache-Factory (docs/methods.md §3).
// Defaults: sinks s = 4. Budget: per (layer, KV head), **includes** the sinks. Every layer and head
// keeps the same set. Keys keep their original RoPE positions (the benchmark ports' behaviour; the
// original's cache-slot re-rotation is not reproduced).
#include "policies/methods.h"
#include "policies/scored_policy.h"

namespace kvb {
namespace {

class StreamingLlmPolicy : public ScoredPolicy {
 public:
  using ScoredPolicy::ScoredPolicy;
  // Recency is the score: the top (n_kept − s) non-sink positions are the most recent ones.
  std::vector<std::vector<float>> score(const LayerPrefillView& layer) const override {
    std::vector<float> recency(layer.length);
    for (int j = 0; j < layer.length; ++j) recency[j] = static_cast<float>(j);
    return std::vector<std::vector<float>>(layer.n_kv_heads, recency);
  }
};

}  // namespace

PolicyFactory streamingllm_factory() {
  return fixed_capture_factory<StreamingLlmPolicy>(
      {"streamingllm",
       PolicyKind::kPrefillQueryAgnostic,
       "attention sinks + most recent tokens",
       "mit-han-lab/streaming-llm kv_cache.py; kvpress streaming_llm_press.py",
       {{"sinks", 4}, {"dense_layers", nlohmann::json::array()}}},
      CaptureRequest{});  // positions only
}

}  // namespace kvb
