// The question appended after compaction (question-agnostic mode) on the CUDA engine: one forward
// over every (token, sequence) row (CudaEngine::extend) against
// - the CPU engine's chunked forward over the same compacted caches (CpuBackend::extend) at the
//   GPU's rounding points (engine/cpu/device_numerics.h), and
// - a decode step per token on the GPU (what CudaBackend::extend did before),
// on random weights with kept sets of a different length for every (layer, KV head), three
// sequences of different prompts, and decode steps after it that read what the extend appended.
// The steps take the CPU's tokens as their inputs (teacher forcing), so that one near-tie flip
// costs one token of the count rather than every later token of its sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/errors.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_engine.h"
#include "engine/presets.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb {
namespace {

constexpr int kSequences = 3, kPrompt = 96, kSteps = 4;

// Entries of every third position dropped, shifted per (layer, head), so that each head keeps its
// own count and its own positions; the last 8 (the window) always kept.
KeptIndices ragged_kept(const ModelConfig& c, int length) {
  KeptIndices kept(c.n_layers, std::vector<std::vector<int32_t>>(c.n_kv_heads));
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int i = 0; i < length; ++i)
        if (i >= length - 8 || (i + l + 2 * h) % (3 + h) != 0) kept[l][h].push_back(i);
  return kept;
}

std::vector<TokenId> prompt_of(int seq) {
  return test::strided_token_ids(kPrompt, 37 + 2 * seq, 11 + seq, 1000);
}

// Each sequence prefilled and compacted to ragged_kept, with room for the question and kSteps.
void prepare(Engine& engine, int question_tokens) {
  const int spare = question_tokens + kSteps + 4;
  engine.reserve(kSequences, kPrompt + spare);
  for (int s = 0; s < kSequences; ++s) {
    PrefillCapture capture;
    engine.prefill(s, prompt_of(s), CaptureRequest{}, capture);
    engine.compact(s, ragged_kept(engine.config(), kPrompt), spare);
  }
}

// The largest |a - b| over the logits, as a share of b's largest |logit|, and whether b's top two
// are further apart than twice that (so that a's argmax must be b's).
struct LogitGap {
  double relative = 0;
  bool decisive = false;
};
LogitGap logit_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  std::vector<float> top = b;
  std::nth_element(top.begin(), top.begin() + 1, top.end(), std::greater<float>());
  return {worst / scale, top[0] - top[1] > 2 * worst};
}

using Tokens = std::vector<std::vector<TokenId>>;  // [after the question, after step i][sequence]

// prepare, the question through `append`, then kSteps greedy steps of all sequences together, each
// step's input the token `forced` holds (the engine's own when null). The tokens after the
// question and after every step.
template <typename Append>
Tokens run(Engine& engine, const std::vector<TokenId>& question, Append append,
           const Tokens* forced = nullptr) {
  prepare(engine, static_cast<int>(question.size()));
  Tokens tokens;
  tokens.push_back(append(engine));
  CachePlan plan;
  for (int s = 0; s < kSequences; ++s) engine.start_decode(s, plan, kPrompt, 0);
  engine.prepare_decode();
  for (int step = 0; step < kSteps; ++step) {
    std::vector<DecodeInput> inputs;
    for (int s = 0; s < kSequences; ++s)
      inputs.push_back({s, (forced ? *forced : tokens)[step][s],
                        kPrompt + static_cast<int>(question.size()) + step, step});
    tokens.push_back(engine.decode(inputs));
  }
  for (int s = 0; s < kSequences; ++s) engine.finish_decode(s);
  return tokens;
}

TEST(CudaExtend, OneForwardEqualsTheCpuChunkAndADecodeStepPerToken) {
  KVB_REQUIRE_GPU();
  // Greedy tokens of random weights have wide margins only where the logits are spread: a
  // vocabulary of 1,000 and the random model's logit scale make near-ties rare but not absent,
  // so the comparisons count agreements rather than demand every token.
  auto weights =
      random_weights(test::small_random_model("random-extend", 2, 256, 64, 512, 1000), 7);
  const std::vector<TokenId> question = test::strided_token_ids(11, 13, 5, 1000);
  const std::vector<int> all = {0, 1, 2};
  auto extend = [&](Engine& engine) { return engine.extend(all, question, kPrompt); };

  CpuBackend cpu(*weights, KvDtype::kBf16, ForwardPrecision::kBf16Device);
  const Tokens on_cpu = run(cpu, question, extend);
  CudaBackend gpu(*weights);
  const Tokens on_gpu = run(gpu, question, extend, &on_cpu);
  // The previous path: a batched decode step per question token.
  CudaBackend stepwise(*weights);
  const Tokens per_token = run(
      stepwise, question,
      [&](Engine&) {
        CudaEngine& device = stepwise.device();
        std::vector<int32_t> next;
        for (size_t t = 0; t < question.size(); ++t) {
          const int position = kPrompt + static_cast<int>(t);
          device.set_next_tokens(0, std::vector<int32_t>(kSequences, question[t]),
                                 std::vector<int32_t>(kSequences, position));
          device.decode_step(0, kSequences, /*use_graph=*/true);
          next = device.next_tokens(0, kSequences);
        }
        return std::vector<TokenId>(next.begin(), next.end());
      },
      &on_cpu);

  int same_as_cpu = 0, same_as_steps = 0, total = 0;
  for (size_t i = 0; i < on_gpu.size(); ++i)
    for (int s = 0; s < kSequences; ++s) {
      same_as_cpu += on_gpu[i][s] == on_cpu[i][s];
      same_as_steps += on_gpu[i][s] == per_token[i][s];
      ++total;
    }
  EXPECT_GE(same_as_cpu * 10, total * 9) << same_as_cpu << " of " << total;
  EXPECT_GE(same_as_steps * 10, total * 9) << same_as_steps << " of " << total;
  // Right after the question: the logits of the one forward are the per-token steps' within bf16
  // differences of the products' shapes, and so is the greedy token where it is decisive.
  CudaBackend once(*weights), steps(*weights);
  prepare(once, static_cast<int>(question.size()));
  prepare(steps, static_cast<int>(question.size()));
  const std::vector<TokenId> after_once = once.extend(all, question, kPrompt);
  std::vector<int32_t> after_steps;
  for (size_t t = 0; t < question.size(); ++t) {
    const int position = kPrompt + static_cast<int>(t);
    steps.device().set_next_tokens(0, std::vector<int32_t>(kSequences, question[t]),
                                   std::vector<int32_t>(kSequences, position));
    steps.device().decode_step(0, kSequences, /*use_graph=*/false);
    after_steps = steps.device().next_tokens(0, kSequences);
  }
  for (int s = 0; s < kSequences; ++s) {
    const LogitGap gap = logit_gap(once.device().last_logits(s), steps.device().last_logits(s));
    EXPECT_LT(gap.relative, 0.03) << "sequence " << s;
    if (gap.decisive) EXPECT_EQ(after_once[s], after_steps[s]) << "sequence " << s;
  }
  // Lengths: each (layer, head) grew by the question and the steps from its own kept count.
  const ModelConfig& c = weights->config;
  const KeptIndices kept = ragged_kept(c, kPrompt);
  for (int s = 0; s < kSequences; ++s)
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        EXPECT_EQ(gpu.device().length(l, s, h),
                  static_cast<int>(kept[l][h].size() + question.size()) + kSteps);
}

// The rows of the extend's forward against the next token of each sequence: one sequence's
// extend equals the batch's for that sequence (the rows of other sequences do not leak in), and a
// range in the middle of the batch leaves the sequences outside it untouched.
TEST(CudaExtend, SequencesOfOneExtendDoNotSeeEachOther) {
  KVB_REQUIRE_GPU();
  auto weights =
      random_weights(test::small_random_model("random-extend-alone", 2, 256, 64, 512, 1000), 9);
  const ModelConfig& c = weights->config;
  const std::vector<int32_t> question = test::strided_token_ids(7, 29, 3, 1000);
  auto setup = [&](CudaEngine& engine) {
    engine.allocate_cache(kSequences, kPrompt + 16);
    for (int s = 0; s < kSequences; ++s) {
      engine.prefill(s, prompt_of(s));
      engine.compact(s, ragged_kept(c, kPrompt));
    }
  };
  auto together = CudaEngine::from_weights(*weights);
  setup(*together);
  const std::vector<int32_t> all = together->extend(0, kSequences, question, kPrompt);
  for (int s = 0; s < kSequences; ++s) {
    auto alone = CudaEngine::from_weights(*weights);
    setup(*alone);
    const int before_other = alone->length(0, (s + 1) % kSequences, 0);
    const int32_t next = alone->extend(s, 1, question, kPrompt)[0];
    const LogitGap gap = logit_gap(alone->last_logits(s), together->last_logits(s));
    EXPECT_LT(gap.relative, 0.02) << "sequence " << s;
    if (gap.decisive) EXPECT_EQ(next, all[s]) << "sequence " << s;
    EXPECT_EQ(alone->length(0, (s + 1) % kSequences, 0), before_other);
    EXPECT_EQ(alone->next_position(s), kPrompt + static_cast<int>(question.size()));
  }
  EXPECT_THROW(together->extend(0, kSequences, {}, kPrompt), InputError);
}

}  // namespace
}  // namespace kvb
