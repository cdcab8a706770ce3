#include "engine/prefill_capture.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvb {

PrefillView make_prefill_view(const ModelWeights& weights, const KvStore& store,
                              const PrefillCapture& capture, const CaptureRequest& request) {
  const ModelConfig& c = weights.config;
  PrefillView view;
  view.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerPrefillView& layer = view.layers[l];
    layer.layer = l;
    layer.length = capture.length;
    layer.n_query_heads = c.n_query_heads;
    layer.n_kv_heads = c.n_kv_heads;
    layer.head_dim = c.head_dim;
    layer.d_model = c.d_model;
    layer.window = capture.window;
    if (capture.window > 0) layer.query_window = capture.query_window[l].data();
    if (!capture.column_sums.empty()) layer.column_sums = capture.column_sums[l].data();
    if (request.output_projection) layer.output_projection = weights.layers[l].wo.data();
    for (int h = 0; h < c.n_kv_heads; ++h) {
      if (store.length(l, h) != capture.length)
        throw std::logic_error("make_prefill_view: layer " + std::to_string(l) + " head " +
                               std::to_string(h) + " holds " + std::to_string(store.length(l, h)) +
                               " entries, expected the whole prompt of " +
                               std::to_string(capture.length));
      layer.keys.push_back(store.keys(l, h));
      layer.values.push_back(store.values(l, h));
    }
  }
  return view;
}

PrefillCapture captures_for(const PrefillCapture& captured, const CaptureRequest& wanted,
                            int n_query_heads, int head_dim) {
  PrefillCapture view = captured;
  const int w = std::min(wanted.window_queries, captured.length);
  if (w < captured.window) {
    for (auto& layer : view.query_window) {
      std::vector<float> trimmed(static_cast<size_t>(n_query_heads) * w * head_dim);
      for (int a = 0; a < n_query_heads; ++a)
        std::copy_n(
            &layer[(static_cast<size_t>(a) * captured.window + captured.window - w) * head_dim],
            static_cast<size_t>(w) * head_dim, &trimmed[static_cast<size_t>(a) * w * head_dim]);
      layer = std::move(trimmed);
    }
    view.window = w;
  }
  return view;
}

void check_captures(const PrefillCapture& captured, const CaptureRequest& wanted,
                    const std::string& policy) {
  const int w = std::min(wanted.window_queries, captured.length);
  if (w > captured.window || (wanted.attention_column_sums && captured.column_sums.empty()))
    throw std::logic_error("the prefill lacks captures that policy '" + policy +
                           "' needs; prefill with the union of the cells' CaptureRequests");
}

}  // namespace kvb
