#include "kernels/cpu/early_exit_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvb::kernels {
namespace {

struct BlockRange {
  int begin = 0;
  int end = 0;
};

// Sink block first, then the most recent block backwards down to the sinks.
std::vector<BlockRange> walk_order(int n, const EarlyExitOptions& options) {
  std::vector<BlockRange> blocks;
  const int sinks = std::clamp(options.sink_tokens, 0, n);
  if (sinks > 0) blocks.push_back({0, sinks});
  const int block = std::max(options.block_size, 1);
  for (int end = n; end > sinks; end -= block) blocks.push_back({std::max(sinks, end - block), end});
  return blocks;
}

float norm(const float* x, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(std::sqrt(sum));
}

// The online-softmax state of one KV group's query heads and the stability test after each block.
class GroupWalker {
 public:
  GroupWalker(const EarlyExitAttentionArgs& args, const EarlyExitOptions& options)
      : queries_(args.queries), keys_(args.keys), values_(args.values),
        logit_bias_(args.logit_bias), n_heads_(args.n_heads), head_dim_(args.head_dim),
        scale_(args.scale > 0 ? args.scale : 1.0f / std::sqrt(static_cast<float>(args.head_dim))),
        options_(options), max_(n_heads_, -std::numeric_limits<float>::infinity()),
        mass_(n_heads_, 0.0f), accumulator_(static_cast<size_t>(n_heads_) * head_dim_, 0.0f),
        previous_(accumulator_.size(), 0.0f), current_(accumulator_.size(), 0.0f),
        counter_(n_heads_, 0), logits_(std::max(options.block_size, options.sink_tokens)) {}

  // Folds one block into every head's state; returns true when every head is stable.
  bool absorb(const BlockRange& block) {
    bool all_stable = true;
    for (int a = 0; a < n_heads_; ++a) all_stable &= absorb_head(a, block);
    ++blocks_seen_;
    return all_stable;
  }

  // o = acc / Z of every head.
  const std::vector<float>& output() const { return current_; }

  // Final softmax weights of the entries of `blocks` for every head ([n_heads, n], zeros kept
  // elsewhere).
  void write_probabilities(const std::vector<BlockRange>& blocks, int n, float* probabilities) const {
    std::fill(probabilities, probabilities + static_cast<int64_t>(n_heads_) * n, 0.0f);
    for (int a = 0; a < n_heads_; ++a) {
      const float* q = queries_ + static_cast<int64_t>(a) * head_dim_;
      float* row = probabilities + static_cast<int64_t>(a) * n;
      for (const BlockRange& block : blocks)
        for (int j = block.begin; j < block.end; ++j) row[j] = std::exp(logit(q, j) - max_[a]) / mass_[a];
    }
  }

 private:
  float logit(const float* q, int j) const {
    const float* k = keys_ + static_cast<int64_t>(j) * head_dim_;
    float dot = 0;
    for (int i = 0; i < head_dim_; ++i) dot += q[i] * k[i];
    return dot * scale_ + (logit_bias_ ? logit_bias_[j] : 0.0f);
  }

  bool absorb_head(int a, const BlockRange& block) {
    const float* q = queries_ + static_cast<int64_t>(a) * head_dim_;
    const int count = block.end - block.begin;
    if (static_cast<int>(logits_.size()) < count) logits_.resize(count);
    float block_max = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < count; ++t) {
      logits_[t] = logit(q, block.begin + t);
      block_max = std::max(block_max, logits_[t]);
    }
    float* acc = accumulator_.data() + static_cast<int64_t>(a) * head_dim_;
    const float new_max = std::max(max_[a], block_max);
    if (new_max > max_[a] && mass_[a] > 0) {
      const float rescale = std::exp(max_[a] - new_max);
      mass_[a] *= rescale;
      for (int i = 0; i < head_dim_; ++i) acc[i] *= rescale;
    }
    max_[a] = new_max;
    float added_mass = 0;
    for (int t = 0; t < count; ++t) {
      const float weight = std::exp(logits_[t] - new_max);
      added_mass += weight;
      const float* v = values_ + static_cast<int64_t>(block.begin + t) * head_dim_;
      for (int i = 0; i < head_dim_; ++i) acc[i] += weight * v[i];
    }
    mass_[a] += added_mass;

    float* previous = previous_.data() + static_cast<int64_t>(a) * head_dim_;
    float* current = current_.data() + static_cast<int64_t>(a) * head_dim_;
    std::copy(current, current + head_dim_, previous);
    for (int i = 0; i < head_dim_; ++i) current[i] = acc[i] / mass_[a];
    if (blocks_seen_ == 0) return false;  // no previous output to compare with yet

    const float previous_norm = norm(previous, head_dim_);
    const float current_norm = norm(current, head_dim_);
    const float d_scale = options_.scale_criterion == EarlyExitScaleCriterion::kMass
                              ? added_mass / mass_[a]
                              : std::fabs(current_norm - previous_norm) /
                                    std::max(previous_norm, std::numeric_limits<float>::min());
    double cross = 0;
    for (int i = 0; i < head_dim_; ++i) cross += static_cast<double>(previous[i]) * current[i];
    const double denominator = static_cast<double>(previous_norm) * current_norm;
    const float d_direction =
        denominator > 0 ? static_cast<float>(1.0 - cross / denominator) : 1.0f;
    if (d_scale < options_.tau && d_direction < options_.phi) {
      ++counter_[a];
    } else {
      counter_[a] = 0;
    }
    return counter_[a] >= options_.patience;
  }

  const float* queries_;
  const float* keys_;
  const float* values_;
  const float* logit_bias_;
  int n_heads_;
  int head_dim_;
  float scale_;
  EarlyExitOptions options_;
  std::vector<float> max_;
  std::vector<float> mass_;
  std::vector<float> accumulator_;
  std::vector<float> previous_;
  std::vector<float> current_;
  std::vector<int> counter_;
  std::vector<float> logits_;
  int blocks_seen_ = 0;
};

}  // namespace

void EarlyExitWalkStats::add(const EarlyExitWalkStats& other) {
  blocks_visited += other.blocks_visited;
  blocks_total += other.blocks_total;
  walks += other.walks;
  walks_stopped_early += other.walks_stopped_early;
}

int early_exit_block_count(int n, const EarlyExitOptions& options) {
  return static_cast<int>(walk_order(n, options).size());
}

void early_exit_attention(const EarlyExitAttentionArgs& args, const EarlyExitOptions& options,
                          EarlyExitWalkStats* stats) {
  std::vector<BlockRange> blocks = walk_order(args.n_entries, options);
  const int total = static_cast<int>(blocks.size());
  GroupWalker walker(args, options);
  int visited = 0;
  for (const BlockRange& block : blocks) {
    const bool stable = walker.absorb(block);
    ++visited;
    if (stable && options.enabled) break;
  }
  const std::vector<float>& output = walker.output();
  std::copy(output.begin(), output.end(), args.output);
  blocks.resize(visited);
  if (args.probabilities) walker.write_probabilities(blocks, args.n_entries, args.probabilities);
  if (stats) {
    stats->blocks_visited += visited;
    stats->blocks_total += total;
    stats->walks += 1;
    if (visited < total) stats->walks_stopped_early += 1;
  }
}

EarlyExitOracleTrace early_exit_oracle_trace(const EarlyExitAttentionArgs& args,
                                             const EarlyExitOptions& options, float tolerance) {
  const std::vector<BlockRange> blocks = walk_order(args.n_entries, options);
  const int n_heads = args.n_heads, head_dim = args.head_dim;
  EarlyExitOracleTrace trace;
  trace.blocks_total = static_cast<int>(blocks.size());
  GroupWalker walker(args, options);
  std::vector<std::vector<float>> outputs;
  for (const BlockRange& block : blocks) {
    trace.probe_says_stop.push_back(walker.absorb(block));
    outputs.push_back(walker.output());
  }
  if (outputs.empty()) return trace;
  const std::vector<float>& full = outputs.back();
  for (size_t b = 0; b < outputs.size(); ++b) {
    float worst = 0;
    for (int a = 0; a < n_heads; ++a) {
      const float* o = outputs[b].data() + static_cast<int64_t>(a) * head_dim;
      const float* f = full.data() + static_cast<int64_t>(a) * head_dim;
      double diff = 0;
      for (int i = 0; i < head_dim; ++i) diff += (o[i] - f[i]) * static_cast<double>(o[i] - f[i]);
      const float full_norm = norm(f, head_dim);
      const float error = full_norm > 0 ? static_cast<float>(std::sqrt(diff)) / full_norm
                                        : static_cast<float>(std::sqrt(diff));
      worst = std::max(worst, error);
    }
    trace.relative_error.push_back(worst);
    if (trace.oracle_stop_block < 0 && worst < tolerance) trace.oracle_stop_block = static_cast<int>(b);
    if (trace.probe_stop_block < 0 && trace.probe_says_stop[b]) trace.probe_stop_block = static_cast<int>(b);
  }
  for (int b = trace.blocks_total - 1; b >= 0 && trace.relative_error[b] < tolerance; --b)
    trace.safe_stop_block = b;
  return trace;
}

void EarlyExitOracleSummary::add(const EarlyExitOracleTrace& trace, float tolerance) {
  walks += 1;
  if (trace.probe_stop_block >= 0) {
    probe_stops += 1;
    const float error = trace.relative_error[trace.probe_stop_block];
    if (error >= tolerance) premature_stops += 1;
    relative_error_at_stop_sum += error;
  }
  blocks += trace.blocks_total;
  if (trace.safe_stop_block >= 0) safely_skippable_blocks += trace.blocks_total - 1 - trace.safe_stop_block;
  for (size_t b = 0; b < trace.relative_error.size(); ++b) {
    const bool probe = trace.probe_says_stop[b];
    const bool oracle = trace.relative_error[b] < tolerance;
    boundaries += 1;
    if (probe == oracle) agreements += 1;
    if (probe && !oracle) false_positives += 1;
    if (!probe && oracle) false_negatives += 1;
  }
}

void EarlyExitOracleSummary::add(const EarlyExitOracleSummary& other) {
  walks += other.walks;
  probe_stops += other.probe_stops;
  premature_stops += other.premature_stops;
  boundaries += other.boundaries;
  agreements += other.agreements;
  false_positives += other.false_positives;
  false_negatives += other.false_negatives;
  relative_error_at_stop_sum += other.relative_error_at_stop_sum;
  blocks += other.blocks;
  safely_skippable_blocks += other.safely_skippable_blocks;
}

}  // namespace kvb::kernels
