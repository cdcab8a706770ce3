#include "engine/cache_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "common/errors.h"

namespace kvb {

Budget Budget::parse(const std::string& text) {
  const std::string fix = " (use a token count such as 512, or a fraction such as 5% or 0.05)";
  if (text.empty()) throw InputError("budget is empty" + fix);
  std::string number = text;
  const bool percent = number.back() == '%';
  if (percent) number.pop_back();
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end == number.c_str() || *end != '\0' || !std::isfinite(value))
    throw InputError("budget '" + text + "' is not a number" + fix);
  if (value <= 0) throw InputError("budget '" + text + "' must be > 0" + fix);
  Budget budget;
  if (percent) {
    if (value > 100) throw InputError("budget '" + text + "' is over 100%" + fix);
    budget.unit = Unit::kFraction;
    budget.value = value / 100.0;
  } else if (value < 1.0) {
    budget.unit = Unit::kFraction;
    budget.value = value;
  } else {
    if (value != std::floor(value))
      throw InputError("budget '" + text + "' is neither a whole token count nor a fraction" + fix);
    // Token counts are ints downstream (tokens_for, to_string); a larger one was undefined
    // behaviour there (found by tests/fuzz/sweep_config_fuzz.cc).
    if (value > std::numeric_limits<int>::max())
      throw InputError("budget '" + text + "' is more tokens than any context holds (at most " +
                       std::to_string(std::numeric_limits<int>::max()) + ")" + fix);
    budget.unit = Unit::kTokens;
    budget.value = value;
  }
  return budget;
}

int Budget::tokens_for(int prompt_length) const {
  if (unit == Unit::kTokens) return static_cast<int>(value);
  return static_cast<int>(value * prompt_length);
}

std::string Budget::to_string() const {
  std::ostringstream out;
  if (unit == Unit::kTokens) {
    out << static_cast<long long>(value);
  } else {
    out << value * 100 << '%';
  }
  return out.str();
}

namespace {

template <typename T>
void merge_sorted_unique(std::vector<T>& into, const std::vector<T>& more) {
  into.insert(into.end(), more.begin(), more.end());
  std::sort(into.begin(), into.end());
  into.erase(std::unique(into.begin(), into.end()), into.end());
}

}  // namespace

void CaptureRequest::merge(const CaptureRequest& other) {
  window_queries = std::max(window_queries, other.window_queries);
  attention_column_sums |= other.attention_column_sums;
  output_projection |= other.output_projection;
  merge_sorted_unique(window_attention_sums, other.window_attention_sums);
  merge_sorted_unique(output_perturbations, other.output_perturbations);
  key_norms |= other.key_norms;
  projected_value_norms |= other.projected_value_norms;
  host_keys_values |= other.host_keys_values;
  layer_inputs |= other.layer_inputs;
}

const float* LayerPrefillView::window_sums_for(const WindowSumsRequest& request) const {
  for (const WindowSums& entry : window_attention_sums)
    if (entry.request == request) return entry.sums;
  return nullptr;
}

const float* LayerPrefillView::perturbation_for(const PerturbationRequest& request) const {
  for (const Perturbation& entry : output_perturbations)
    if (entry.request == request) return entry.scores;
  return nullptr;
}

bool decode_reads_f32_rows(const CachePlan& plan) {
  return plan.selector != nullptr || plan.early_exit.has_value();
}

void start_decode_policies(CachePlan& plan, KvStore& store, int prompt_tokens, int budget_tokens) {
  if (decode_reads_f32_rows(plan)) {
    store.widen();
  } else {
    store.narrow();
  }
  if (plan.decode_eviction) plan.decode_eviction->start(store, prompt_tokens, budget_tokens);
  if (plan.selector) plan.selector->start(store, prompt_tokens, budget_tokens);
}

}  // namespace kvb
