#include "kernels/cpu/early_exit_decode.h"

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
  for (int end = n; end > sinks; end -= block)
    blocks.push_back({std::max(sinks, end - block), end});
  return blocks;
}

float norm(const float* x, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(std::sqrt(sum));
}

// The stability test over a group's heads: per-head counters of consecutive blocks that passed,
// and (per_head) the heads whose output is final.
class StabilityTest {
 public:
  StabilityTest(int n_heads, const EarlyExitOptions& options)
      : options_(options), counter_(n_heads, 0), done_(n_heads, false) {}

  bool done(int a) const { return done_[a]; }

  // Counts head a's readings after a block; returns whether the head is stable now.
  bool update(int a, const EarlyExitReadings& readings) {
    const bool scale_ok =
        !options_.use_scale || early_exit_scale(readings, options_.scale_criterion) < options_.tau;
    const bool direction_ok = !options_.use_direction || readings.direction < options_.phi;
    counter_[a] = scale_ok && direction_ok ? counter_[a] + 1 : 0;
    return counter_[a] >= options_.patience;
  }

  // After every head's update for a block: whether the walk ends here. Group mode: every head is
  // stable after this same block. Per-head mode: a stable head is done from now on (its output
  // keeps this block), and the walk ends once every head is done. Past the decision window
  // nothing stops.
  bool finish_block(const std::vector<bool>& stable) {
    if (options_.decision_window > 0 && block_++ >= options_.decision_window) return false;
    bool all = true;
    for (size_t a = 0; a < stable.size(); ++a) {
      if (options_.per_head && stable[a]) done_[a] = true;
      all &= options_.per_head ? done_[a] : static_cast<bool>(stable[a]);
    }
    return all;
  }

 private:
  EarlyExitOptions options_;
  std::vector<int> counter_;
  std::vector<bool> done_;
  int block_ = 0;
};

// The online-softmax state of one KV group's query heads and the readings after each block.
class GroupWalker {
 public:
  GroupWalker(const EarlyExitDecodeArgs& args, const EarlyExitOptions& options)
      : queries_(args.queries),
        keys_(args.keys),
        values_(args.values),
        logit_bias_(args.logit_bias),
        n_heads_(args.n_heads),
        head_dim_(args.head_dim),
        scale_(args.scale > 0 ? args.scale : 1.0f / std::sqrt(static_cast<float>(args.head_dim))),
        max_(n_heads_, -std::numeric_limits<float>::infinity()),
        mass_(n_heads_, 0.0f),
        accumulator_(static_cast<size_t>(n_heads_) * head_dim_, 0.0f),
        previous_(accumulator_.size(), 0.0f),
        current_(accumulator_.size(), 0.0f),
        blocks_(n_heads_, 0),
        logits_(std::max(options.block_size, options.sink_tokens)) {}

  // Folds one block into head a's state and returns its readings (zeros for its first block).
  EarlyExitReadings absorb(int a, const BlockRange& block) {
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
    if (blocks_[a]++ == 0) return {};  // no previous output to compare with yet

    // Three sums over the head dimension (the GPU decider reduces the same three): ‖o_b‖²,
    // ‖o_{b−1}‖² and ‖o_b − o_{b−1}‖². 1 − cos is taken as (‖Δo‖² − (‖o_b‖ − ‖o_{b−1}‖)²) /
    // (2 ‖o_b‖ ‖o_{b−1}‖), the same quantity without the cancellation of 1 − <o_b, o_{b−1}> /
    // (‖o_b‖ ‖o_{b−1}‖), which floors near 1e-7 in float.
    double current_sq = 0, previous_sq = 0, difference_sq = 0;
    for (int i = 0; i < head_dim_; ++i) {
      const double step = static_cast<double>(current[i]) - previous[i];
      current_sq += static_cast<double>(current[i]) * current[i];
      previous_sq += static_cast<double>(previous[i]) * previous[i];
      difference_sq += step * step;
    }
    constexpr float kTiny = std::numeric_limits<float>::min();
    const float current_norm = static_cast<float>(std::sqrt(current_sq));
    const float previous_norm = static_cast<float>(std::sqrt(previous_sq));
    const float norm_step = current_norm - previous_norm;
    EarlyExitReadings readings;
    readings.mass = added_mass / mass_[a];
    readings.norm = std::fabs(norm_step) / std::max(previous_norm, kTiny);
    readings.change = static_cast<float>(std::sqrt(difference_sq)) / std::max(current_norm, kTiny);
    const float denominator = 2.0f * current_norm * previous_norm;
    readings.direction =
        denominator > 0
            ? std::max(0.0f,
                       (static_cast<float>(difference_sq) - norm_step * norm_step) / denominator)
            : 1.0f;
    return readings;
  }

  // Mass of head a so far, relative to its running max (for the trace's block shares).
  double mass(int a) const { return mass_[a]; }
  float max_logit(int a) const { return max_[a]; }

  // o = acc / Z of every head.
  const std::vector<float>& output() const { return current_; }

  // Final softmax weights of the entries of each head's visited blocks ([n_heads, n], zeros
  // elsewhere); head a folded head_blocks[a] blocks of `blocks`.
  void write_probabilities(const std::vector<BlockRange>& blocks,
                           const std::vector<int>& head_blocks, int n, float* probabilities) const {
    std::fill(probabilities, probabilities + static_cast<int64_t>(n_heads_) * n, 0.0f);
    for (int a = 0; a < n_heads_; ++a) {
      const float* q = queries_ + static_cast<int64_t>(a) * head_dim_;
      float* row = probabilities + static_cast<int64_t>(a) * n;
      for (int b = 0; b < head_blocks[a]; ++b)
        for (int j = blocks[b].begin; j < blocks[b].end; ++j)
          row[j] = std::exp(logit(q, j) - max_[a]) / mass_[a];
    }
  }

  float logit_of(int a, int j) const {
    return logit(queries_ + static_cast<int64_t>(a) * head_dim_, j);
  }

 private:
  float logit(const float* q, int j) const {
    const float* k = keys_ + static_cast<int64_t>(j) * head_dim_;
    float dot = 0;
    for (int i = 0; i < head_dim_; ++i) dot += q[i] * k[i];
    return dot * scale_ + (logit_bias_ ? logit_bias_[j] : 0.0f);
  }

  const float* queries_;
  const float* keys_;
  const float* values_;
  const float* logit_bias_;
  int n_heads_;
  int head_dim_;
  float scale_;
  std::vector<float> max_;
  std::vector<float> mass_;
  std::vector<float> accumulator_;
  std::vector<float> previous_;
  std::vector<float> current_;
  std::vector<int> blocks_;
  std::vector<float> logits_;
};

float relative_l2(const float* x, const float* reference, int n) {
  double diff = 0;
  for (int i = 0; i < n; ++i)
    diff += (x[i] - reference[i]) * static_cast<double>(x[i] - reference[i]);
  const float reference_norm = norm(reference, n);
  return reference_norm > 0 ? static_cast<float>(std::sqrt(diff)) / reference_norm
                            : static_cast<float>(std::sqrt(diff));
}

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

float early_exit_scale(const EarlyExitReadings& readings, EarlyExitScaleCriterion criterion) {
  switch (criterion) {
    case EarlyExitScaleCriterion::kMass:
      return readings.mass;
    case EarlyExitScaleCriterion::kNorm:
      return readings.norm;
    case EarlyExitScaleCriterion::kChange:
      return readings.change;
  }
  return readings.mass;
}

void early_exit_decode(const EarlyExitDecodeArgs& args, const EarlyExitOptions& options,
                       EarlyExitWalkStats* stats) {
  std::vector<BlockRange> blocks = walk_order(args.n_entries, options);
  const int total = static_cast<int>(blocks.size());
  GroupWalker walker(args, options);
  StabilityTest test(args.n_heads, options);
  std::vector<int> head_blocks(args.n_heads, 0);
  std::vector<bool> stable(args.n_heads, false);
  int visited = 0;
  for (const BlockRange& block : blocks) {
    for (int a = 0; a < args.n_heads; ++a) {
      if (options.enabled && test.done(a)) continue;  // per-head mode: this head's output is final
      const EarlyExitReadings readings = walker.absorb(a, block);
      ++head_blocks[a];
      stable[a] = visited > 0 && test.update(a, readings);
    }
    ++visited;
    if (test.finish_block(stable) && options.enabled) break;
  }
  const std::vector<float>& output = walker.output();
  std::copy(output.begin(), output.end(), args.output);
  if (args.probabilities)
    walker.write_probabilities(blocks, head_blocks, args.n_entries, args.probabilities);
  if (stats) {
    stats->blocks_visited += visited;
    stats->blocks_total += total;
    stats->walks += 1;
    if (visited < total) stats->walks_stopped_early += 1;
  }
}

EarlyExitWalkTrace early_exit_walk_trace(const EarlyExitDecodeArgs& args,
                                         const EarlyExitOptions& options) {
  const std::vector<BlockRange> blocks = walk_order(args.n_entries, options);
  const int n_heads = args.n_heads, head_dim = args.head_dim;
  EarlyExitWalkTrace trace;
  trace.n_heads = n_heads;
  trace.blocks = static_cast<int>(blocks.size());
  trace.readings.resize(static_cast<size_t>(trace.blocks) * n_heads);
  trace.error.resize(trace.readings.size());
  trace.mass_share.resize(trace.readings.size());
  GroupWalker walker(args, options);
  std::vector<std::vector<float>> outputs;
  for (int b = 0; b < trace.blocks; ++b) {
    for (int a = 0; a < n_heads; ++a) trace.readings[trace.at(b, a)] = walker.absorb(a, blocks[b]);
    outputs.push_back(walker.output());
  }
  if (outputs.empty()) return trace;
  const std::vector<float>& full = outputs.back();
  for (int a = 0; a < n_heads; ++a) {
    const int64_t offset = static_cast<int64_t>(a) * head_dim;
    for (int b = 0; b < trace.blocks; ++b) {
      trace.error[trace.at(b, a)] =
          relative_l2(outputs[b].data() + offset, full.data() + offset, head_dim);
      double block_mass = 0;
      for (int j = blocks[b].begin; j < blocks[b].end; ++j)
        block_mass += std::exp(walker.logit_of(a, j) - walker.max_logit(a));
      trace.mass_share[trace.at(b, a)] = static_cast<float>(block_mass / walker.mass(a));
    }
  }
  return trace;
}

namespace {

// Replays the stability test of `options` over a traced walk without stopping it. After block b:
// says_stop[b] (the walk would end here) and each head's last folded block were it to end here.
struct TestReplay {
  std::vector<bool> says_stop;
  std::vector<std::vector<int>> head_last_block;  // [block][head]
};

TestReplay replay_test(const EarlyExitWalkTrace& trace, const EarlyExitOptions& options) {
  TestReplay replay;
  StabilityTest test(trace.n_heads, options);
  std::vector<bool> stable(trace.n_heads, false);
  std::vector<int> last(trace.n_heads, -1);
  for (int b = 0; b < trace.blocks; ++b) {
    for (int a = 0; a < trace.n_heads; ++a) {
      if (test.done(a)) continue;
      last[a] = b;
      stable[a] = b > 0 && test.update(a, trace.readings[trace.at(b, a)]);
    }
    replay.says_stop.push_back(test.finish_block(stable));
    replay.head_last_block.push_back(last);
  }
  return replay;
}

}  // namespace

EarlyExitStop early_exit_stop(const EarlyExitWalkTrace& trace, const EarlyExitOptions& options) {
  EarlyExitStop stop;
  if (trace.blocks == 0) return stop;
  const TestReplay replay = replay_test(trace, options);
  int end = trace.blocks - 1;
  for (int b = 0; options.enabled && b < trace.blocks; ++b)
    if (replay.says_stop[b]) {
      end = b;
      break;
    }
  stop.visited = end + 1;
  stop.head_last_block = options.enabled ? replay.head_last_block[end]
                                         : std::vector<int>(trace.n_heads, trace.blocks - 1);
  return stop;
}

EarlyExitOracleTrace early_exit_oracle_trace(const EarlyExitDecodeArgs& args,
                                             const EarlyExitOptions& options, float tolerance) {
  const EarlyExitWalkTrace walk = early_exit_walk_trace(args, options);
  const TestReplay replay = replay_test(walk, options);
  EarlyExitOracleTrace trace;
  trace.blocks_total = walk.blocks;
  trace.probe_says_stop = replay.says_stop;
  for (int b = 0; b < walk.blocks; ++b) {
    float worst = 0;
    for (int a = 0; a < walk.n_heads; ++a)
      worst = std::max(worst, walk.error[walk.at(replay.head_last_block[b][a], a)]);
    trace.relative_error.push_back(worst);
    if (trace.oracle_stop_block < 0 && worst < tolerance) trace.oracle_stop_block = b;
    if (trace.probe_stop_block < 0 && trace.probe_says_stop[b]) trace.probe_stop_block = b;
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
  if (trace.safe_stop_block >= 0)
    safely_skippable_blocks += trace.blocks_total - 1 - trace.safe_stop_block;
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
