// kvbench select --policy P --budget B [--params JSON] --inputs F.safetensors [--json]
// Runs a prefill policy on given tensors and prints the kept positions per (layer, KV head):
//   q_window [layers, Hq, w, d] (post-RoPE), k / v [layers, Hkv, L, d] (post-RoPE keys),
//   optional w_o [layers, D, Hq*d] (CriticalKV), optional column_sums [layers, Hq, L] (H2O).
// JSON: {"kept": [[[positions...] per KV head] per layer]} with sorted positions.
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "engine/safetensors.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/sweep/select_decode.h"
#include "policies/registry.h"
#include "policies/selection.h"

namespace kvb::cli {
namespace {

struct SelectInputs {
  std::vector<int64_t> q_shape, k_shape, v_shape, wo_shape, sums_shape;
  std::vector<float> q, k, v, wo, sums;
};

void require_rank(const std::string& file, const std::string& name,
                  const std::vector<int64_t>& shape, size_t rank, const std::string& layout) {
  if (shape.size() != rank)
    throw InputError(file + ": tensor '" + name + "' must have shape " + layout);
}

SelectInputs read_inputs(const std::string& path) {
  const auto file = SafetensorsFile::open(path);
  SelectInputs in;
  for (const char* name : {"q_window", "k", "v"})
    if (!file->find(name))
      throw InputError(path + ": missing tensor '" + std::string(name) +
                       "' (need q_window [layers,Hq,w,d], k and v [layers,Hkv,L,d])");
  in.q = file->read_f32("q_window", &in.q_shape);
  in.k = file->read_f32("k", &in.k_shape);
  in.v = file->read_f32("v", &in.v_shape);
  require_rank(path, "q_window", in.q_shape, 4, "[layers, Hq, w, d]");
  require_rank(path, "k", in.k_shape, 4, "[layers, Hkv, L, d]");
  if (in.v_shape != in.k_shape)
    throw InputError(path + ": tensors 'k' and 'v' must have one shape");
  if (in.q_shape[0] != in.k_shape[0] || in.q_shape[3] != in.k_shape[3])
    throw InputError(path + ": q_window and k disagree on layers or head dimension");
  if (in.k_shape[1] <= 0 || in.q_shape[1] % in.k_shape[1] != 0)
    throw InputError(path + ": query heads (" + std::to_string(in.q_shape[1]) +
                     ") must be a multiple of KV heads (" + std::to_string(in.k_shape[1]) + ")");
  if (in.q_shape[2] > in.k_shape[2])
    throw InputError(path + ": more window queries than prompt tokens");
  if (file->find("w_o")) {
    in.wo = file->read_f32("w_o", &in.wo_shape);
    require_rank(path, "w_o", in.wo_shape, 3, "[layers, D, Hq*d]");
    if (in.wo_shape[0] != in.q_shape[0] || in.wo_shape[2] != in.q_shape[1] * in.q_shape[3])
      throw InputError(path + ": w_o must have shape [layers, D, Hq*d]");
  }
  if (file->find("column_sums")) {
    in.sums = file->read_f32("column_sums", &in.sums_shape);
    if (in.sums_shape != std::vector<int64_t>{in.q_shape[0], in.q_shape[1], in.k_shape[2]})
      throw InputError(path + ": column_sums must have shape [layers, Hq, L]");
  }
  return in;
}

PrefillView make_view(const SelectInputs& in) {
  const int layers = int(in.q_shape[0]), hq = int(in.q_shape[1]), w = int(in.q_shape[2]);
  const int d = int(in.q_shape[3]), hkv = int(in.k_shape[1]), length = int(in.k_shape[2]);
  PrefillView view;
  for (int l = 0; l < layers; ++l) {
    LayerPrefillView layer;
    layer.layer = l;
    layer.length = length;
    layer.n_query_heads = hq;
    layer.n_kv_heads = hkv;
    layer.head_dim = d;
    layer.d_model = in.wo.empty() ? hq * d : int(in.wo_shape[1]);
    layer.window = w;
    layer.query_window = in.q.data() + int64_t(l) * hq * w * d;
    for (int h = 0; h < hkv; ++h) {
      const int64_t offset = (int64_t(l) * hkv + h) * length * d;
      layer.keys.push_back(in.k.data() + offset);
      layer.values.push_back(in.v.data() + offset);
    }
    if (!in.sums.empty()) layer.column_sums = in.sums.data() + int64_t(l) * hq * length;
    if (!in.wo.empty())
      layer.output_projection = in.wo.data() + int64_t(l) * layer.d_model * hq * d;
    view.layers.push_back(layer);
  }
  return view;
}

void check_captures(const PrefillPolicy& policy, const SelectInputs& in, const std::string& path) {
  const CaptureRequest need = policy.capture();
  if (need.window_queries > in.q_shape[2])
    throw InputError(path + ": policy '" + policy.name() + "' needs " +
                     std::to_string(need.window_queries) + " window queries, q_window has " +
                     std::to_string(in.q_shape[2]) + " (or pass a smaller \"window\" in --params)");
  if ((need.output_projection || need.projected_value_norms) && in.wo.empty())
    throw InputError(path + ": policy '" + policy.name() +
                     "' needs tensor 'w_o' [layers, D, Hq*d]");
  if (need.attention_column_sums && in.sums.empty())
    throw InputError(path + ": policy '" + policy.name() +
                     "' needs tensor 'column_sums' [layers, Hq, L]");
}

// Decode-time selection (kind D) for tensors holding q_decode [layers,Hq,d] with k/v
// [layers,Hkv,L,d], and those the policy takes in place of a file (policy_tensor_inputs):
// prints {"selected": ...}.
int select_decode(const std::string& path, const std::string& spec, const nlohmann::json& params,
                  const Budget& budget, bool json) {
  const auto file = SafetensorsFile::open(path);
  for (const char* name : {"k", "v"})
    if (!file->find(name))
      throw InputError(path + ": missing tensor '" + std::string(name) +
                       "' (need k and v [layers,Hkv,L,d])");
  std::vector<int64_t> q_shape, k_shape, v_shape;
  const std::vector<float> q = file->read_f32("q_decode", &q_shape);
  const std::vector<float> k = file->read_f32("k", &k_shape);
  const std::vector<float> v = file->read_f32("v", &v_shape);
  require_rank(path, "q_decode", q_shape, 3, "[layers, Hq, d]");
  require_rank(path, "k", k_shape, 4, "[layers, Hkv, L, d]");
  if (v_shape != k_shape) throw InputError(path + ": tensors 'k' and 'v' must have one shape");
  if (q_shape[0] != k_shape[0] || q_shape[2] != k_shape[3] || k_shape[1] <= 0 ||
      q_shape[1] % k_shape[1] != 0)
    throw InputError(path + ": q_decode [layers,Hq,d] and k [layers,Hkv,L,d] disagree");
  DecodeSelectInputs inputs;
  for (const TensorInput& input : policy_tensor_inputs(spec)) {
    if (!file->find(input.tensor)) continue;
    GivenTensor tensor;
    tensor.values = file->read_f32(input.tensor, &tensor.shape);
    inputs.tensors[input.tensor] = std::move(tensor);
  }
  inputs.n_layers = static_cast<int>(k_shape[0]);
  inputs.n_query_heads = static_cast<int>(q_shape[1]);
  inputs.n_kv_heads = static_cast<int>(k_shape[1]);
  inputs.length = static_cast<int>(k_shape[2]);
  inputs.head_dim = static_cast<int>(k_shape[3]);
  inputs.keys = k.data();
  inputs.values = v.data();
  inputs.query = q.data();
  const nlohmann::json out = select_decode_positions(spec, params, budget, inputs);
  if (json) {
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "policy " << spec << ", budget " << budget.to_string()
              << ": selected entries per layer\n";
    for (size_t l = 0; l < out["selected"].size(); ++l) {
      std::cout << "layer " << l << ":";
      for (const auto& head : out["selected"][l]) std::cout << " " << head.size();
      std::cout << "\n";
    }
  }
  return 0;
}

}  // namespace

int select(const std::vector<std::string>& argv) {
  Args args("select", argv, {"json"});
  args.allow_only({"policy", "budget", "params", "inputs", "json"});
  const std::string spec = args.get("policy");
  const Budget budget = Budget::parse(args.get("budget"));
  nlohmann::json params = nlohmann::json::object();
  if (auto text = args.maybe("params")) {
    try {
      params = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& error) {  // parse_error, or out_of_range for 1e999
      throw InputError("--params is not valid JSON (" + std::string(error.what()) + ")");
    }
  }
  const std::string path = args.get("inputs");
  if (SafetensorsFile::open(path)->find("q_decode"))
    return select_decode(path, spec, params, budget, args.flag("json"));
  CachePlan plan = make_cache_plan(spec, params, budget);
  const SelectInputs inputs = read_inputs(path);
  const PrefillView view = make_view(inputs);
  const int length = view.prompt_length();
  const int budget_tokens = budget.tokens_for(length);
  check_budget(spec, budget_tokens, length);

  KeptIndices kept;
  if (plan.prefill) {
    check_captures(*plan.prefill, inputs, path);
    kept = plan.prefill->select(view, budget_tokens);
  } else {
    for (const auto& layer : view.layers) kept.emplace_back(layer.n_kv_heads, keep_all(length));
  }
  if (args.flag("json")) {
    std::cout << nlohmann::json{{"kept", kept}}.dump() << "\n";
  } else {
    std::cout << "policy " << spec << ", budget " << budget.to_string() << " = " << budget_tokens
              << " of " << length << " tokens\n";
    for (size_t l = 0; l < kept.size(); ++l) {
      std::cout << "layer " << l << ":";
      for (const auto& head : kept[l]) std::cout << " " << head.size();
      std::cout << " tokens per KV head\n";
    }
  }
  return 0;
}

}  // namespace kvb::cli
