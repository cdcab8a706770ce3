// Decode-time sparse attention on the GPU, one layer of Llama-3.1-8B (Hq 32, Hkv 8, d 128, B 1):
// BinaryPC (bit-plane scores, the query packing folded in + top-k with EAS + sparse attention) and
// Quest (page upper bounds + page top-k + expansion + sparse attention) against dense
// decode_attention over the whole context, all measured in the same run. Each step is timed with
// CUDA events after warm-up; the table gives medians over the repetitions, with the L2 cache
// flushed before each repetition (a real decode step reaches a layer with other layers' data in
// L2).
//
//   cuda_sparse_decode_bench [--contexts 32768,131072,524288] [--budget 2048] [--reps 50]
//
// "BPC top-k (old)" times BinaryPC's top-k through the radix path that the one-pass 16-bit
// histogram replaced (TopkSelectArgs::keys16_as_digits), after the same scoring kernel, in the same
// run: an A/B on the same card. A second table times the step's alternatives the same way: the
// top-k without a workspace (one kernel: the cluster form up to 8 blocks of 40,960 keys per list,
// against the split form's memset and two kernels) and the sparse attention with longer chunks
// (fewer blocks and partials to merge than the engine's 64).
//
// The BinaryPC paper reports 4.0x over dense attention at 512K with a 2,048-token budget.
// Keys, values, queries and projections are random (speed does not depend on them); the prompt is
// the whole context (no decode tokens in the forced tail). The once-per-layer table also times
// online BinaryPC's projection fit of the layer (binary_fit_projection, 4 iterations per bit) with
// its rate over the f32 residual it streams (64 bits x 4 passes); the card's DRAM bandwidth bounds
// it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/binary_hash.h"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/page_bounds.h"
#include "kernels/cuda/topk_select.h"
#include "kernels/cuda/transformer_ops.h"

namespace kvb {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kHq = 32, kHkv = 8, kD = 128, kGroup = kHq / kHkv, kPage = 16;
constexpr size_t kFlushBytes = size_t(256) << 20;  // > the H200's 50 MB L2

struct Options {
  std::vector<int> contexts = {32768, 131072, 524288};
  int budget = 2048;
  int reps = 50;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--contexts") {
      options.contexts.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');)
        options.contexts.push_back(std::stoi(item));
    } else if (flag == "--budget") {
      options.budget = std::stoi(value);
    } else if (flag == "--reps") {
      options.reps = std::max(20, std::stoi(value));
    } else {
      throw std::invalid_argument("unknown option " + flag + " (use --contexts, --budget, --reps)");
    }
  }
  return options;
}

// Times a sequence of steps: per repetition, events around each step; medians per step and total.
class StepTimer {
 public:
  StepTimer(int steps, int reps) : steps_(steps), times_(steps + 1) {
    events_.resize(steps + 1);
    for (auto& e : events_) cuda::check(cudaEventCreate(&e), "cudaEventCreate");
    for (auto& t : times_) t.reserve(reps);
  }
  StepTimer(const StepTimer&) = delete;  // owns its events
  StepTimer& operator=(const StepTimer&) = delete;
  ~StepTimer() {
    for (auto& e : events_) cudaEventDestroy(e);
  }
  void mark(int i) { cuda::check(cudaEventRecord(events_[i]), "cudaEventRecord"); }
  void collect() {
    cuda::check(cudaEventSynchronize(events_[steps_]), "cudaEventSynchronize");
    for (int s = 0; s < steps_; ++s) times_[s].push_back(elapsed(events_[s], events_[s + 1]));
    times_[steps_].push_back(elapsed(events_[0], events_[steps_]));
  }
  double median(int step) {  // step == steps: the whole sequence
    std::vector<float> t = times_[step];
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  }

 private:
  static float elapsed(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms;
  }
  int steps_;
  std::vector<cudaEvent_t> events_;
  std::vector<std::vector<float>> times_;
};

struct Layer {
  explicit Layer(int length, int budget)
      : length(length),
        k(size_t(kHkv) * length * kD * 2),
        v(size_t(kHkv) * length * kD * 2),
        q(size_t(kHq) * kD * 2),
        out(size_t(kHq) * kD * 2),
        kv_offset(kHkv * 8),
        kv_length(kHkv * 4),
        projection(size_t(kHkv) * cuda::kSignCodeBits * kD * 4),
        codes(size_t(kHkv) * length * 8),
        errors(size_t(kHkv) * length * 4),
        mask(size_t(kHkv) * words() * 4),
        score_keys(size_t(kHkv) * length * 2),
        bpc_indices(size_t(kHkv) * budget * 4),
        index_offset(kHq * 8),
        index_count(kHq * 4),
        page_min(size_t(kHkv) * pages() * kD * 2),
        page_max(size_t(kHkv) * pages() * kD * 2),
        page_scores(size_t(kHq) * pages() * 4),
        page_ids(size_t(kHq) * pages() * 4),
        quest_indices(size_t(kHq) * pages() * kPage * 4),
        topk_workspace(cuda::topk_select_workspace_bytes(kHq, length, cuda::TopkKeys::kU16)),
        dense_workspace(cuda::decode_attention_workspace_floats(1, kHq, kD, length) * 4),
        sparse_workspace(cuda::decode_attention_workspace_floats(
                             1, kHq, kD, std::max(budget, 3 * kPage) + kPage) *
                         4) {
    cuda::fill_random_bf16(k.as<bf16>(), size_t(kHkv) * length * kD, 1, 1.f, nullptr);
    cuda::fill_random_bf16(v.as<bf16>(), size_t(kHkv) * length * kD, 2, 1.f, nullptr);
    cuda::fill_random_bf16(q.as<bf16>(), size_t(kHq) * kD, 3, 1.f, nullptr);
    std::vector<int64_t> offsets(kHkv);
    for (int h = 0; h < kHkv; ++h) offsets[h] = int64_t(h) * length;
    kv_offset.upload(offsets.data(), offsets.size() * 8);
    std::vector<int32_t> lengths(kHkv, length);
    kv_length.upload(lengths.data(), lengths.size() * 4);
    std::mt19937 rng(7);
    std::normal_distribution<float> gaussian(0.f, 1.f / std::sqrt(float(kD)));
    std::vector<float> rows(size_t(kHkv) * cuda::kSignCodeBits * kD);
    for (float& x : rows) x = gaussian(rng);
    projection.upload(rows.data(), rows.size() * 4);
  }
  int words() const { return (length + 31) / 32; }
  int pages() const { return (length + kPage - 1) / kPage; }

  cuda::DecodeAttentionArgs attention_args() const {
    cuda::DecodeAttentionArgs a;
    a.q = q.as<bf16>();
    a.q_seq_stride = kHq * kD;
    a.k = k.as<bf16>();
    a.v = v.as<bf16>();
    a.kv_offset = kv_offset.as<int64_t>();
    a.kv_length = kv_length.as<int32_t>();
    a.max_kv_length = length;
    a.out = out.as<bf16>();
    a.out_seq_stride = kHq * kD;
    a.batch = 1;
    a.n_query_heads = kHq;
    a.n_kv_heads = kHkv;
    a.head_dim = kD;
    a.scale = 1.f / std::sqrt(float(kD));
    a.workspace = dense_workspace.as<float>();
    return a;
  }

  int length;
  cuda::DeviceBuffer k, v, q, out, kv_offset, kv_length, projection, codes, errors, mask,
      score_keys, bpc_indices, index_offset, index_count, page_min, page_max, page_scores, page_ids,
      quest_indices, topk_workspace, dense_workspace, sparse_workspace;
};

struct Row {
  int context = 0;
  double dense = 0;
  double bpc[4] = {};                // score (with packing), select, attention, total
  double bpc_topk_old = 0;           // select through the radix path (A/B)
  double bpc_topk_no_workspace = 0;  // select in one kernel (A/B)
  double bpc_attn_chunk[2] = {};     // the sparse attention at kAltChunks (A/B)
  double quest[5] = {};              // page scores, page top-k, expand, attention, total
  double quest_shared_total = 0;
  double hash_prefill = 0, eas_prefill = 0, pages_prefill = 0, hash_append = 0, page_append = 0;
  double fit = 0;  // online BinaryPC's projection fit of the layer's KV heads
};

double time_once(const std::function<void()>& body) {
  StepTimer timer(1, 1);
  timer.mark(0);
  body();
  timer.mark(1);
  timer.collect();
  return timer.median(1);
}

constexpr int kAltChunks[2] = {128, 256};

Row measure(int length, const Options& options, cuda::DeviceBuffer& flush) {
  Layer layer(length, options.budget);
  Row row;
  row.context = length;
  const int k = std::min(options.budget, length);
  const int err_k = std::min(std::max(int(0.1 * k), 1), length);

  // After prefill (once): codes and reconstruction errors, the EAS set, Quest's page bounds.
  cuda::BinaryHashKeysArgs hash;
  hash.projection = layer.projection.as<float>();
  hash.keys = layer.k.as<bf16>();
  hash.key_slot_stride = int64_t(length) * kD;
  hash.n_slots = kHkv;
  hash.head_dim = kD;
  hash.begin = 0;
  hash.end = length;
  hash.codes = layer.codes.as<uint64_t>();
  hash.code_slot_stride = length;
  hash.reconstruction_error = layer.errors.as<float>();
  cuda::DeviceBuffer eas(size_t(kHkv) * err_k * 4);
  row.hash_prefill = time_once([&] { cuda::binary_hash_keys(hash, nullptr); });
  row.eas_prefill = time_once([&] {
    cuda::TopkSelectArgs top;
    top.scores = layer.errors.as<float>();
    top.key_stride = length;
    top.n_lists = kHkv;
    top.length = length;
    top.k = err_k;
    top.indices = eas.as<int32_t>();
    top.index_stride = err_k;
    top.workspace = layer.topk_workspace.data();
    top.workspace_bytes = layer.topk_workspace.bytes();
    cuda::topk_select(top, nullptr);
    cuda::check(cudaMemsetAsync(layer.mask.data(), 0, layer.mask.bytes()), "memset");
    cuda::binary_mark_tokens(eas.as<int32_t>(), err_k, kHkv, err_k, layer.mask.as<uint32_t>(),
                             layer.words(), nullptr);
  });
  cuda::PageBoundsArgs pages;
  pages.keys = layer.k.as<bf16>();
  pages.key_slot_stride = int64_t(length) * kD;
  pages.n_slots = kHkv;
  pages.head_dim = kD;
  pages.page_size = kPage;
  pages.begin = 0;
  pages.end = length;
  pages.page_min = layer.page_min.as<bf16>();
  pages.page_max = layer.page_max.as<bf16>();
  pages.page_slot_stride = int64_t(layer.pages()) * kD;
  pages.max_pages = layer.pages();
  row.pages_prefill = time_once([&] { cuda::update_page_bounds(pages, nullptr); });
  // Online BinaryPC's fit of the layer's 8 heads from random start vectors (4 iterations per bit).
  {
    std::vector<const bf16*> heads(kHkv);
    for (int h = 0; h < kHkv; ++h) heads[h] = layer.k.as<bf16>() + int64_t(h) * length * kD;
    cuda::DeviceBuffer pointers(heads.size() * sizeof(void*)), fitted(layer.projection.bytes()),
        workspace(cuda::binary_fit_projection_workspace_bytes(kHkv, length, kD));
    pointers.upload(heads.data(), pointers.bytes());
    row.fit = time_once([&] {
      cuda::binary_fit_projection({.keys = pointers.as<const bf16*>(),
                                   .n_slots = kHkv,
                                   .head_dim = kD,
                                   .length = length,
                                   .starts = layer.projection.as<float>(),
                                   .projection = fitted.as<float>(),
                                   .workspace = workspace.data()},
                                  nullptr);
    });
  }
  // One appended token (its code and its page), as each decode step does per layer.
  hash.reconstruction_error = nullptr;
  hash.begin = length - 1;
  row.hash_append = time_once([&] { cuda::binary_hash_keys(hash, nullptr); });
  pages.begin = length - 1;
  row.page_append = time_once([&] { cuda::update_page_bounds(pages, nullptr); });

  cuda::BinaryScoreKeysArgs score;
  score.projection = layer.projection.as<float>();
  score.q = layer.q.as<bf16>();
  score.q_seq_stride = kHq * kD;
  score.head_dim = kD;
  score.codes = layer.codes.as<uint64_t>();
  score.code_slot_stride = length;
  score.forced_mask = layer.mask.as<uint32_t>();
  score.mask_slot_stride = layer.words();
  score.batch = 1;
  score.n_query_heads = kHq;
  score.n_kv_heads = kHkv;
  score.length = length;
  score.keys = layer.score_keys.as<uint16_t>();
  score.key_slot_stride = length;
  cuda::TopkSelectArgs select;
  select.keys16 = layer.score_keys.as<uint16_t>();
  select.key_stride = length;
  select.n_lists = kHkv;
  select.length = length;
  select.k = k;
  select.indices = layer.bpc_indices.as<int32_t>();
  select.index_stride = k;
  select.heads_per_list = kGroup;
  select.index_offset = layer.index_offset.as<int64_t>();
  select.index_count = layer.index_count.as<int32_t>();
  select.workspace = layer.topk_workspace.data();
  select.workspace_bytes = layer.topk_workspace.bytes();
  cuda::DecodeAttentionArgs bpc_attention = layer.attention_args();
  bpc_attention.indices = layer.bpc_indices.as<int32_t>();
  bpc_attention.index_offset = layer.index_offset.as<int64_t>();
  bpc_attention.index_count = layer.index_count.as<int32_t>();
  bpc_attention.max_kv_length = k;
  bpc_attention.shared_group_lists = true;  // one list per KV head, as the engine's
  bpc_attention.chunk_size = 64;            // as the engine's
  bpc_attention.workspace = layer.sparse_workspace.as<float>();
  cuda::TopkSelectArgs select_old = select;
  select_old.keys16_as_digits = true;
  cuda::TopkSelectArgs select_no_workspace = select;
  select_no_workspace.workspace = nullptr;
  select_no_workspace.workspace_bytes = 0;

  const int page_budget = cuda::pages_for_budget(length, options.budget, kPage, 3);
  auto quest_step = [&](bool shared, StepTimer* timer) {
    const int lists = shared ? kHkv : kHq;
    cuda::PageScoreArgs scores;
    scores.q = layer.q.as<bf16>();
    scores.q_seq_stride = kHq * kD;
    scores.batch = 1;
    scores.n_query_heads = kHq;
    scores.n_kv_heads = kHkv;
    scores.head_dim = kD;
    scores.page_min = layer.page_min.as<bf16>();
    scores.page_max = layer.page_max.as<bf16>();
    scores.page_slot_stride = int64_t(layer.pages()) * kD;
    scores.max_pages = layer.pages();
    scores.n_pages = layer.pages();
    scores.shared = shared;
    scores.scores = layer.page_scores.as<float>();
    scores.score_stride = layer.pages();
    cuda::TopkSelectArgs top;
    top.scores = layer.page_scores.as<float>();
    top.key_stride = layer.pages();
    top.n_lists = lists;
    top.length = layer.pages();
    top.k = page_budget;
    top.indices = layer.page_ids.as<int32_t>();
    top.index_stride = page_budget;
    top.workspace = layer.topk_workspace.data();
    top.workspace_bytes = layer.topk_workspace.bytes();
    cuda::ExpandPagesArgs expand;
    expand.pages = layer.page_ids.as<int32_t>();
    expand.page_stride = page_budget;
    expand.n_lists = lists;
    expand.n_selected = page_budget;
    expand.page_size = kPage;
    expand.length = length;
    expand.indices = layer.quest_indices.as<int32_t>();
    expand.index_stride = int64_t(page_budget) * kPage;
    expand.heads_per_list = shared ? kGroup : 1;
    expand.index_offset = layer.index_offset.as<int64_t>();
    expand.index_count = layer.index_count.as<int32_t>();
    cuda::DecodeAttentionArgs attention = layer.attention_args();
    attention.indices = layer.quest_indices.as<int32_t>();
    attention.index_offset = layer.index_offset.as<int64_t>();
    attention.index_count = layer.index_count.as<int32_t>();
    attention.max_kv_length = page_budget * kPage;
    attention.workspace = layer.sparse_workspace.as<float>();
    attention.shared_group_lists = shared;  // as the engine
    attention.chunk_size = 64;
    timer->mark(0);
    cuda::page_bound_scores(scores, nullptr);
    timer->mark(1);
    cuda::topk_select(top, nullptr);
    timer->mark(2);
    cuda::expand_pages(expand, nullptr);
    timer->mark(3);
    cuda::decode_attention(attention, nullptr);
    timer->mark(4);
  };

  const cuda::DecodeAttentionArgs dense = layer.attention_args();
  StepTimer dense_timer(1, options.reps), bpc_timer(3, options.reps), quest_timer(4, options.reps),
      shared_timer(4, options.reps), old_topk_timer(2, options.reps),
      no_workspace_timer(2, options.reps), chunk_a_timer(3, options.reps),
      chunk_b_timer(3, options.reps);
  StepTimer* chunk_timers[2] = {&chunk_a_timer, &chunk_b_timer};
  // BinaryPC's step from a flushed L2 — scoring, a top-k and (when given) the sparse attention —
  // so that every variant finds its inputs where the step's own kernels leave them.
  auto bpc_step = [&](int rep, StepTimer& timer, const cuda::TopkSelectArgs& top,
                      const cuda::DecodeAttentionArgs* attention) {
    cuda::check(cudaMemsetAsync(flush.data(), rep & 0xff, flush.bytes()), "flush L2");
    timer.mark(0);
    cuda::binary_score_keys(score, nullptr);
    timer.mark(1);
    cuda::topk_select(top, nullptr);
    timer.mark(2);
    if (!attention) return;
    cuda::decode_attention(*attention, nullptr);
    timer.mark(3);
  };
  const int warmup = 3;
  for (int rep = 0; rep < warmup + options.reps; ++rep) {
    cuda::check(cudaMemsetAsync(flush.data(), rep & 0xff, flush.bytes()), "flush L2");
    dense_timer.mark(0);
    cuda::decode_attention(dense, nullptr);
    dense_timer.mark(1);
    bpc_step(rep, bpc_timer, select, &bpc_attention);
    bpc_step(rep, old_topk_timer, select_old, nullptr);
    bpc_step(rep, no_workspace_timer, select_no_workspace, nullptr);
    for (int c = 0; c < 2; ++c) {
      cuda::DecodeAttentionArgs longer = bpc_attention;
      longer.chunk_size = kAltChunks[c];
      bpc_step(rep, *chunk_timers[c], select, &longer);
    }
    cuda::check(cudaMemsetAsync(flush.data(), rep & 0xff, flush.bytes()), "flush L2");
    quest_step(false, &quest_timer);
    cuda::check(cudaMemsetAsync(flush.data(), rep & 0xff, flush.bytes()), "flush L2");
    quest_step(true, &shared_timer);
    if (rep < warmup) {
      cuda::check(cudaDeviceSynchronize(), "warm-up");
      continue;
    }
    dense_timer.collect();
    bpc_timer.collect();
    quest_timer.collect();
    shared_timer.collect();
    old_topk_timer.collect();
    no_workspace_timer.collect();
    for (StepTimer* timer : chunk_timers) timer->collect();
  }
  row.dense = dense_timer.median(1);
  for (int s = 0; s < 4; ++s) row.bpc[s] = bpc_timer.median(s);
  row.bpc_topk_old = old_topk_timer.median(1);
  row.bpc_topk_no_workspace = no_workspace_timer.median(1);
  for (int c = 0; c < 2; ++c) row.bpc_attn_chunk[c] = chunk_timers[c]->median(2);
  for (int s = 0; s < 5; ++s) row.quest[s] = quest_timer.median(s);
  row.quest_shared_total = shared_timer.median(4);
  return row;
}

int run(int argc, char** argv) {
  const Options options = parse(argc, argv);
  if (!cuda::device_available()) {
    std::printf("no CUDA device: nothing measured\n");
    return 0;
  }
  const cuda::DeviceInfo info = cuda::device_info();
  std::printf(
      "device: %s (%d SMs, L2 %d MB); Llama-3.1-8B layer: Hq %d, Hkv %d, d %d, B 1; budget %d "
      "tokens; "
      "median of %d reps (3 warm-up), L2 flushed before each step group\n\n",
      info.name.c_str(), info.sm_count, info.l2_bytes >> 20, kHq, kHkv, kD, options.budget,
      options.reps);
  cuda::DeviceBuffer flush(kFlushBytes, "L2 flush");
  std::vector<Row> rows;
  for (int context : options.contexts) rows.push_back(measure(context, options, flush));

  std::printf("per-layer decode attention, ms (speed-up = dense / method total)\n");
  std::printf(
      "| context | dense | BPC score (with packing) | BPC top-k | BPC top-k (old) | BPC attn |"
      " BPC total | BPC speed-up | Quest bounds | Quest top-k | Quest expand | Quest attn |"
      " Quest total | Quest speed-up | Quest shared total | shared speed-up |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf(
        "| %d | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.2fx |"
        " %.4f | %.4f | %.4f | %.4f | %.4f | %.2fx | %.4f | %.2fx |\n",
        r.context, r.dense, r.bpc[0], r.bpc[1], r.bpc_topk_old, r.bpc[2], r.bpc[3],
        r.dense / r.bpc[3], r.quest[0], r.quest[1], r.quest[2], r.quest[3], r.quest[4],
        r.dense / r.quest[4], r.quest_shared_total, r.dense / r.quest_shared_total);
  std::printf(
      "\nBinaryPC's step, alternatives timed in the same run (ms; the step's own: top-k with the "
      "workspace, attention in chunks of 64)\n");
  std::printf(
      "| context | top-k | top-k without workspace | attn (chunk 64) | attn (chunk %d) | attn "
      "(chunk %d) |\n",
      kAltChunks[0], kAltChunks[1]);
  std::printf("|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %d | %.4f | %.4f | %.4f | %.4f | %.4f |\n", r.context, r.bpc[1],
                r.bpc_topk_no_workspace, r.bpc[2], r.bpc_attn_chunk[0], r.bpc_attn_chunk[1]);
  std::printf("\nonce per layer after prefill / per appended token, ms (single cold run)\n");
  std::printf(
      "| context | BPC hash all keys (+errors) | EAS top-k + mask | Quest page bounds | hash 1 "
      "token |"
      " 1 page update | dense K/V GB/s | BPC online fit | fit residual GB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double kv_bytes = 2.0 * kHkv * double(r.context) * kD * 2;
    // The fit reads the f32 residual [Hkv, L, d] once per iteration of each of the 64 bits.
    const double residual_bytes = 4.0 * 64 * kHkv * double(r.context) * kD * 4;
    std::printf("| %d | %.3f | %.3f | %.3f | %.4f | %.4f | %.0f | %.2f | %.0f |\n", r.context,
                r.hash_prefill, r.eas_prefill, r.pages_prefill, r.hash_append, r.page_append,
                kv_bytes / (r.dense * 1e-3) / 1e9, r.fit, residual_bytes / (r.fit * 1e-3) / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace kvb

int main(int argc, char** argv) {
  try {
    return kvb::run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "cuda_sparse_decode_bench: %s\n", error.what());
    return 2;
  }
}
