#include "engine/prefill_capture.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/errors.h"

namespace kvb {

PrefillView make_prefill_view(const ModelWeights& weights, const KvStore* store,
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
    const bool norms_computed = !capture.projected_value_norms.empty();
    if (norms_computed) layer.projected_value_norms = capture.projected_value_norms[l].data();
    if (request.output_projection || (request.projected_value_norms && !norms_computed)) {
      if (weights.layers.empty())
        throw InputError("a policy reads the output projection W_o on the host, and model '" +
                         weights.source +
                         "' has its weights on the device only; run it with "
                         "\"device\": \"cpu\" or choose a policy without W_o");
      const WeightMatrix& wo = weights.layers[l].wo;
      if (wo.is_f32()) {
        layer.output_projection = wo.f32().data();
      } else {  // encoded weights: the view keeps an f32 copy of this layer's W_o
        layer.output_projection_storage = std::make_shared<const std::vector<float>>(wo.to_f32());
        layer.output_projection = layer.output_projection_storage->data();
      }
    }
    for (const auto& sums : capture.window_attention_sums)
      layer.window_attention_sums.push_back({sums.request, sums.per_layer[l].data()});
    for (const auto& scores : capture.output_perturbations)
      layer.output_perturbations.push_back({scores.request, scores.per_layer[l].data()});
    if (!capture.key_norms.empty()) layer.key_norms = capture.key_norms[l].data();
    if (!store) continue;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      if (store->length(l, h) != capture.length)
        throw std::logic_error("make_prefill_view: layer " + std::to_string(l) + " head " +
                               std::to_string(h) + " holds " + std::to_string(store->length(l, h)) +
                               " entries, expected the whole prompt of " +
                               std::to_string(capture.length));
      layer.keys.push_back(store->keys(l, h));
      layer.values.push_back(store->values(l, h));
    }
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
