#include "engine/prefill_capture.h"

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

}  // namespace kvb
