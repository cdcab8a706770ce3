// The real prompt the CUDA engine tests set the GPU against the CPU on: SmolLM2-135M
// (test::default_model_path) with ~1,500 tokens of varied English in its chat template, and the
// Jaccard index the kept sets are compared by, and the kept sets a prefill policy chooses on an
// engine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/engine.h"
#include "engine/generation.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "policies/registry.h"
#include "tests/test_paths.h"

namespace kvb::test {

// ~1,500 tokens of varied English with facts to retrieve, deterministic.
inline std::string long_prompt() {
  const char* subjects[] = {"The archive",   "A river pilot",      "The night baker",
                            "Our neighbour", "The old clockmaker", "A travelling violinist"};
  const char* verbs[] = {"remembered", "described", "counted", "painted", "repaired", "sold"};
  const char* objects[] = {"seven lanterns",   "the blue ledger",    "a map of the harbour",
                           "three brass keys", "the winter orchard", "a box of letters"};
  std::string text = "Read the notes below and answer the question at the end.\n\n";
  for (int i = 0; i < 150; ++i)
    text += std::string(subjects[(i * 7) % 6]) + " " + verbs[(i * 5 + 1) % 6] + " " +
            objects[(i * 11 + 2) % 6] + " on day " + std::to_string(100 + i * 3) + ". ";
  text += "\n\nThe special magic number for Lisbon is 4817. ";
  for (int i = 0; i < 30; ++i)
    text += std::string(subjects[(i * 5) % 6]) + " " + verbs[(i * 3) % 6] + " " +
            objects[(i * 7) % 6] + ". ";
  text += "\n\nQuestion: What is the special magic number for Lisbon? Answer with the number.";
  return text;
}

inline double jaccard(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
  const double joined = static_cast<double>(a.size() + b.size() - common.size());
  return joined == 0 ? 1.0 : common.size() / joined;
}

// Issue 17's bound on the Jaccard index of one (layer, KV head)'s kept sets.
inline constexpr double kKeptSetJaccardBound = 0.98;

// Two runs' kept sets compared per (layer, KV head): the mean and worst Jaccard index, where the
// worst lies, and how many heads fall below kKeptSetJaccardBound.
struct JaccardSummary {
  double mean = 0, worst = 1;
  int heads = 0, below_bound = 0;
  int worst_layer = 0, worst_head = 0;
};

inline JaccardSummary compare_kept(const KeptIndices& a, const KeptIndices& b) {
  JaccardSummary s;
  double sum = 0;
  for (size_t l = 0; l < a.size(); ++l)
    for (size_t h = 0; h < a[l].size(); ++h) {
      const double j = jaccard(a[l][h], b[l][h]);
      if (j < s.worst) {
        s.worst_layer = static_cast<int>(l);
        s.worst_head = static_cast<int>(h);
      }
      s.worst = std::min(s.worst, j);
      s.below_bound += j < kKeptSetJaccardBound;
      sum += j;
      ++s.heads;
    }
  s.mean = sum / s.heads;
  return s;
}

struct RealModel {
  LoadedModel model;
  std::vector<TokenId> prompt;
};

// The prompt in the model's chat template (an instruction-tuned model answers a raw prompt with an
// immediate end of turn).
inline RealModel real_model() {
  RealModel m;
  const std::string path = test::default_model_path().string();
  m.model = load_model(path, {.weight_format = WeightFormat::kF32});  // the CPU: the f32 reference
  const ChatTemplate& chat = chat_template(chat_template_name_for(*GgufFile::open(path)));
  m.prompt = m.model.tokenizer->encode(apply_chat_template(chat, long_prompt()), false, true);
  return m;
}

// The prefill policies whose kept sets the GPU is compared on (cuda_backend_test.cc), which the CPU
// test of one shared prefill (tests/policies/shared_prefill_kept_sets_test.cc) covers too.
inline const std::vector<std::string> kKeptSetPolicies = {
    "snapkv", "pyramidkv", "adakv", "dropkv", "knorm", "h2o", "streamingllm", "criticalkv"};

// Their plans at the 20% budget both tests use, in kKeptSetPolicies' order.
inline std::vector<CachePlan> kept_set_plans() {
  std::vector<CachePlan> plans;
  for (const std::string& policy : kKeptSetPolicies)
    plans.push_back(make_cache_plan(policy, nlohmann::json::object(), Budget::parse("20%")));
  return plans;
}

// What kept_sets_on reports or changes beside the kept sets.
struct KeptSetsOptions {
  int spare = 8;  // room in the cache beyond the prompt
  // Replaces the plans' merged request for the prefill and every view (e.g. one that asks for the
  // prompt's keys and values in place of the statistics).
  const CaptureRequest* request = nullptr;
  bool* copied_keys = nullptr;  // whether a view copied the prompt's keys and values to the host
  std::vector<float>* logits = nullptr;  // the prompt's last logits
  PrefillCapture* capture = nullptr;     // what the prefill captured
  bool layer_inputs = false;  // the prefill also captures its layer inputs (into `capture`)
};

// The kept sets of several plans from one prefill: the plans' capture requests merged, each plan's
// selection reading what it needs of the shared capture and one host copy (as a sweep sample's
// cells do).
inline std::vector<KeptIndices> kept_sets_on(Engine& engine, const std::vector<TokenId>& ids,
                                             std::span<CachePlan> plans,
                                             const KeptSetsOptions& options = {}) {
  CaptureRequest merged;
  for (const CachePlan& plan : plans) merged.merge(plan.prefill->capture());
  merged.layer_inputs = options.layer_inputs;
  const CaptureRequest* fixed = options.request;
  engine.reserve(1, static_cast<int>(ids.size()) + options.spare);
  PrefillCapture captured;
  const std::vector<float> last = engine.prefill(0, ids, fixed ? *fixed : merged, captured);
  if (options.logits) *options.logits = last;
  KvStore host_copy;
  std::vector<KeptIndices> kept;
  for (CachePlan& plan : plans)
    kept.push_back(select_kept(
        plan, captured,
        [&](const PrefillCapture& captures, const CaptureRequest& wanted) {
          return engine.prefill_view(0, captures, fixed ? *fixed : wanted, host_copy);
        },
        engine.config(), budget_tokens_for(plan, static_cast<int>(ids.size()))));
  if (options.copied_keys) *options.copied_keys = host_copy.n_layers() > 0;
  if (options.capture) *options.capture = std::move(captured);
  return kept;
}

// One plan's kept set from a prefill of its own.
inline KeptIndices kept_on(Engine& engine, const std::vector<TokenId>& ids, CachePlan& plan,
                           const KeptSetsOptions& options = {}) {
  return kept_sets_on(engine, ids, std::span<CachePlan>(&plan, 1), options).front();
}

}  // namespace kvb::test
