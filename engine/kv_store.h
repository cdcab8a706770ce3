// The KV cache: per layer, per KV head, a variable-length sequence of (position, key, value).
//
// Layout (the same one the CUDA backend mirrors): each layer owns one buffer for keys and one for
// values; KV head h occupies [offset[h], offset[h] + capacity[h]) token slots of it, of which the
// first length[h] are live. Keys are stored after RoPE, so an entry keeps its original position
// whatever is evicted around it. Compaction is a gather into a freshly sized buffer: heads that
// keep fewer tokens (AdaKV-style budgets) really hold less memory, and kv_bytes() counts live
// entries only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvb {

class KvStore {
 public:
  KvStore() = default;
  KvStore(int n_layers, int n_kv_heads, int head_dim);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }

  // Gives every head of every layer room for `tokens_per_head` entries (keeps live entries).
  void reserve(int tokens_per_head);

  // Appends one token to every KV head of `layer`; k and v are [n_kv_heads, head_dim].
  void append(int layer, int32_t position, const float* k, const float* v);
  // Appends one entry to one head (decode-time methods that grow heads independently).
  void append_head(int layer, int head, int32_t position, const float* k, const float* v);

  int length(int layer, int head) const { return layers_[layer].length[head]; }
  const float* keys(int layer, int head) const;    // [length, head_dim]
  const float* values(int layer, int head) const;  // [length, head_dim]
  const int32_t* positions(int layer, int head) const;
  float* mutable_keys(int layer, int head);
  float* mutable_values(int layer, int head);

  // Keeps, for each head of `layer`, the entries at `kept[h]` (indices into the current sequence,
  // strictly increasing) and leaves room for `spare_per_head` appended tokens. Memory is
  // reallocated to fit: the layer's allocation afterwards is sum_h(kept[h].size() + spare).
  void compact(int layer, const std::vector<std::vector<int32_t>>& kept, int spare_per_head);
  // Removes one entry of one head (decode-time eviction), preserving order.
  void erase(int layer, int head, int index);

  int64_t entries() const;  // live (layer, head, token) entries
  int64_t entries(int layer) const;
  int64_t kv_bytes() const;         // live entries * 2 * head_dim * bytes_per_element
  int64_t allocated_bytes() const;  // capacity actually held
  // Element size the accounting reports; the CPU store holds f32 (4), the GPU mirror bf16 (2).
  int bytes_per_element() const { return bytes_per_element_; }
  void set_reported_bytes_per_element(int bytes) { bytes_per_element_ = bytes; }

  void clear();

 private:
  struct Layer {
    std::vector<float> keys;
    std::vector<float> values;
    std::vector<int32_t> positions;
    std::vector<int64_t> offset;    // first slot of each head
    std::vector<int32_t> capacity;  // slots of each head
    std::vector<int32_t> length;    // live slots of each head
  };
  void grow_head(int layer, int head, int min_capacity);
  void relayout(int layer, const std::vector<int32_t>& new_capacity);

  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  int bytes_per_element_ = 4;
  std::vector<Layer> layers_;
};

}  // namespace kvb
