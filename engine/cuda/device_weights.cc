#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "engine/generation.h"

namespace kvb {
namespace {

constexpr int64_t kBf16 = 2;

// Every device tensor of the config, allocated (uninitialised) in the fused layouts.
DeviceWeights allocate(const ModelConfig& c) {
  const int64_t d = c.d_model, q = int64_t{c.n_query_heads} * c.head_dim,
                kv = int64_t{c.n_kv_heads} * c.head_dim, ffn = c.ffn_dim, vocab = c.vocab_size;
  DeviceWeights w;
  w.embedding = cuda::DeviceBuffer(vocab * d * kBf16, "embedding");
  w.output_norm = cuda::DeviceBuffer(d * kBf16, "output norm");
  if (!c.tied_embeddings) w.output = cuda::DeviceBuffer(vocab * d * kBf16, "lm head");
  for (int l = 0; l < c.n_layers; ++l) {
    CudaLayer layer;
    layer.attn_norm = cuda::DeviceBuffer(d * kBf16, "attn norm");
    layer.wqkv = cuda::DeviceBuffer((q + 2 * kv) * d * kBf16, "wqkv");
    if (c.qkv_bias) layer.bqkv = cuda::DeviceBuffer((q + 2 * kv) * kBf16, "qkv bias");
    layer.wo = cuda::DeviceBuffer(d * q * kBf16, "wo");
    layer.ffn_norm = cuda::DeviceBuffer(d * kBf16, "ffn norm");
    layer.w_gate_up = cuda::DeviceBuffer(2 * ffn * d * kBf16, "gate/up");
    layer.w_down = cuda::DeviceBuffer(d * ffn * kBf16, "down");
    w.layers.push_back(std::move(layer));
  }
  return w;
}

// Where a tensor's bf16 rows go on the device: its buffer, at its rows' place in a fused one.
// One line per case: the table reads at a glance.
// clang-format off
char* destination(DeviceWeights& w, const WeightTensor& t, const ModelConfig& c) {
  auto at = [](const cuda::DeviceBuffer& buffer, int64_t elements_before) {
    return static_cast<char*>(buffer.data()) + elements_before * kBf16;
  };
  const int64_t d = c.d_model, q = int64_t{c.n_query_heads} * c.head_dim,
                kv = int64_t{c.n_kv_heads} * c.head_dim, ffn = c.ffn_dim;
  if (t.layer < 0) {
    switch (t.role) {
      case WeightRole::kTokenEmbedding: return at(w.embedding, 0);
      case WeightRole::kOutputNorm: return at(w.output_norm, 0);
      case WeightRole::kOutput: return at(w.output, 0);
      default: break;
    }
  } else {
    CudaLayer& layer = w.layers.at(t.layer);
    switch (t.role) {
      case WeightRole::kAttnNorm: return at(layer.attn_norm, 0);
      case WeightRole::kWq: return at(layer.wqkv, 0);
      case WeightRole::kWk: return at(layer.wqkv, q * d);
      case WeightRole::kWv: return at(layer.wqkv, (q + kv) * d);
      case WeightRole::kBq: return at(layer.bqkv, 0);
      case WeightRole::kBk: return at(layer.bqkv, q);
      case WeightRole::kBv: return at(layer.bqkv, q + kv);
      case WeightRole::kWo: return at(layer.wo, 0);
      case WeightRole::kFfnNorm: return at(layer.ffn_norm, 0);
      case WeightRole::kWGate: return at(layer.w_gate_up, 0);
      case WeightRole::kWUp: return at(layer.w_gate_up, ffn * d);
      case WeightRole::kWDown: return at(layer.w_down, 0);
      default: break;
    }
  }
  throw std::logic_error("upload_weights: no device place for tensor " + t.name);
}
// clang-format on

// Two halves of one pinned buffer: the host fills one while the other's copy is in flight.
class PinnedStaging {
 public:
  explicit PinnedStaging(int64_t bytes) : half_bytes_(std::max<int64_t>(bytes / 2, 1 << 16)) {
    cuda::check(cudaMallocHost(&memory_, 2 * half_bytes_), "cudaMallocHost (weight staging)");
    for (cudaEvent_t& e : copied_)
      cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~PinnedStaging() {
    for (cudaEvent_t e : copied_) cudaEventDestroy(e);
    cudaFreeHost(memory_);
  }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  int64_t half_bytes() const { return half_bytes_; }
  // The next half, once its previous copy has left it.
  uint16_t* acquire() {
    slot_ ^= 1;
    cuda::check(cudaEventSynchronize(copied_[slot_]), "weight upload");
    return reinterpret_cast<uint16_t*>(static_cast<char*>(memory_) + slot_ * half_bytes_);
  }
  // Copies `bytes` of the acquired half to `device` on `stream`.
  void send(void* device, int64_t bytes, cudaStream_t stream) {
    const char* host = static_cast<const char*>(memory_) + slot_ * half_bytes_;
    cuda::check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream),
                "weight upload");
    cuda::check(cudaEventRecord(copied_[slot_], stream), "cudaEventRecord");
  }

 private:
  int64_t half_bytes_;
  void* memory_ = nullptr;
  cudaEvent_t copied_[2] = {};
  int slot_ = 1;
};

// Progress on stderr for loads longer than a few seconds, and always the final line.
class LoadProgress {
 public:
  explicit LoadProgress(const WeightSource& source) : label_(source.label()) {
    for (const WeightTensor& t : source.tensors()) total_bytes_ += t.elements() * kBf16;
    total_tensors_ = static_cast<int64_t>(source.tensors().size());
  }
  void tensor_done(int64_t bytes) {
    ++tensors_;
    bytes_ += bytes;
    const double now = seconds();
    if (now - last_print_ < kEverySeconds) return;
    last_print_ = now;
    std::fprintf(stderr, "[load] %s: tensor %lld/%lld, %.2f of %.2f GB, %.1f s\n", label_.c_str(),
                 static_cast<long long>(tensors_), static_cast<long long>(total_tensors_),
                 bytes_ / 1e9, total_bytes_ / 1e9, now);
  }
  UploadReport finish() const {
    UploadReport r{tensors_, bytes_, seconds(), peak_rss_bytes()};
    std::fprintf(stderr,
                 "[load] %s: %lld tensors, %.2f GB bf16 to the GPU in %.1f s (%.2f GB/s), peak "
                 "host RSS %.2f GB\n",
                 label_.c_str(), static_cast<long long>(r.tensors), r.bytes / 1e9, r.seconds,
                 r.bytes / 1e9 / std::max(r.seconds, 1e-9), r.peak_host_rss_bytes / 1e9);
    return r;
  }

 private:
  static constexpr double kEverySeconds = 3.0;
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::string label_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_print_ = 0;
  int64_t total_bytes_ = 0, bytes_ = 0, total_tensors_ = 0, tensors_ = 0;
};

}  // namespace

DeviceWeights upload_weights(const WeightSource& source, cudaStream_t stream, UploadReport* report,
                             int64_t staging_bytes) {
  const ModelConfig& c = source.config();
  DeviceWeights w = allocate(c);
  PinnedStaging staging(staging_bytes);
  LoadProgress progress(source);
  const std::vector<WeightTensor>& tensors = source.tensors();
  if (!tensors.empty()) source.prefetch(tensors.front());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const WeightTensor& t = tensors[i];
    if (i + 1 < tensors.size()) source.prefetch(tensors[i + 1]);
    char* device = destination(w, t, c);
    const int64_t row_bytes = t.cols * kBf16;
    const int64_t chunk_rows = std::max<int64_t>(1, staging.half_bytes() / row_bytes);
    if (row_bytes > staging.half_bytes())
      throw std::logic_error("upload_weights: a row of " + t.name + " exceeds the staging buffer");
    for (int64_t first = 0; first < t.rows; first += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, t.rows - first);
      uint16_t* host = staging.acquire();
      source.read_rows_bf16(t, first, rows, host);
      source.release(t, first, rows);
      staging.send(device + first * row_bytes, rows * row_bytes, stream);
    }
    source.release(t);
    progress.tensor_done(t.elements() * kBf16);
  }
  cuda::check(cudaStreamSynchronize(stream), "weight upload");
  const UploadReport done = progress.finish();
  if (report) *report = done;
  return w;
}

}  // namespace kvb
