// ART (docs/methods.md §13): the early-exit walk, its parameters and the probe/oracle agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "common/errors.h"
#include "engine/cpu/forward.h"
#include "engine/generation.h"
#include "kernels/cpu/early_exit_decode.h"
#include "policies/decode_selectors.h"
#include "policies/registry.h"
#include "tests/engine/tiny_model.h"
#include "tests/policies/decode_test_util.h"

namespace kvb {
namespace {

using namespace kernels;  // NOLINT: the kernel under test

// One KV head of n entries with a decode-like attention profile: sink keys aligned with the query
// (large logits), recent keys moderately aligned, older keys random.
struct DecodeLikeHead {
  int n = 0;
  int d = 0;
  std::vector<float> queries;  // [heads, d]
  std::vector<float> keys;
  std::vector<float> values;
};

DecodeLikeHead decode_like_head(int n, int d, int heads, uint64_t seed) {
  DecodeLikeHead head{n, d, test::random_vector(static_cast<size_t>(heads) * d, seed),
                      test::random_vector(static_cast<size_t>(n) * d, seed + 1),
                      test::random_vector(static_cast<size_t>(n) * d, seed + 2)};
  for (int j = 0; j < n; ++j) {
    const float pull = j < 4 ? 4.0f : 3.0f * std::exp(-(n - 1 - j) / 48.0f);
    for (int a = 0; a < heads; ++a)
      for (int t = 0; t < d; ++t) head.keys[j * d + t] += pull * head.queries[a * d + t] / heads;
  }
  return head;
}

EarlyExitDecodeArgs walk_args(const DecodeLikeHead& head, int heads) {
  EarlyExitDecodeArgs args;
  args.queries = head.queries.data();
  args.n_heads = heads;
  args.keys = head.keys.data();
  args.values = head.values.data();
  args.n_entries = head.n;
  args.head_dim = head.d;
  return args;
}

std::vector<double> walk(const DecodeLikeHead& head, int heads, const EarlyExitOptions& options,
                         EarlyExitWalkStats* stats, std::vector<float>* probabilities = nullptr) {
  std::vector<float> out(static_cast<size_t>(heads) * head.d);
  EarlyExitDecodeArgs args = walk_args(head, heads);
  args.output = out.data();
  if (probabilities) {
    probabilities->assign(static_cast<size_t>(heads) * head.n, -1.0f);
    args.probabilities = probabilities->data();
  }
  early_exit_decode(args, options, stats);
  return std::vector<double>(out.begin(), out.end());
}

TEST(EarlyExitAttention, ZeroThresholdsReproduceFullAttentionExactly) {
  for (int n : {1, 4, 5, 64, 67, 1000}) {
    const DecodeLikeHead head = decode_like_head(n, 32, 3, n);
    EarlyExitOptions strict;
    strict.tau = 0;
    strict.phi = 0;
    EarlyExitWalkStats stats;
    const std::vector<double> out = walk(head, 3, strict, &stats);
    EXPECT_EQ(stats.blocks_visited, stats.blocks_total);
    EXPECT_EQ(stats.blocks_total, early_exit_block_count(n, strict));
    EarlyExitOptions disabled;
    disabled.enabled = false;
    EXPECT_EQ(walk(head, 3, disabled, nullptr), out) << "same walk, same arithmetic";
    for (int a = 0; a < 3; ++a) {
      const std::vector<double> full =
          test::reference_attention(head.queries.data() + a * 32, head.keys.data(),
                                    head.values.data(), 32, test::all_indices(n));
      const std::vector<double> got(out.begin() + a * 32, out.begin() + (a + 1) * 32);
      EXPECT_LT(test::relative_l2(got, full), 1e-5) << "n " << n;
    }
  }
}

// With thresholds that always pass and patience 1 the walk stops after its second block: the
// output is attention over the sink block and the most recent block only.
TEST(EarlyExitAttention, WalksTheSinkBlockThenTheMostRecentBlock) {
  const int n = 300, d = 16;
  const DecodeLikeHead head = decode_like_head(n, d, 1, 3);
  EarlyExitOptions loose;
  loose.tau = 10;
  loose.phi = 10;
  loose.patience = 1;
  EarlyExitWalkStats stats;
  std::vector<float> probabilities;
  const std::vector<double> out = walk(head, 1, loose, &stats, &probabilities);
  EXPECT_EQ(stats.blocks_visited, 2);
  EXPECT_EQ(stats.blocks_total, 1 + (300 - 4 + 63) / 64);
  std::vector<int32_t> seen = {0, 1, 2, 3};
  for (int j = n - 64; j < n; ++j) seen.push_back(j);
  const std::vector<double> expected =
      test::reference_attention(head.queries.data(), head.keys.data(), head.values.data(), d, seen);
  EXPECT_LT(test::relative_l2(out, expected), 1e-5);
  // The probabilities cover the visited entries only and sum to 1 over them.
  double visited_mass = 0;
  for (int j = 0; j < n; ++j) {
    const bool visited = j < 4 || j >= n - 64;
    if (!visited) {
      EXPECT_EQ(probabilities[j], 0.0f) << j;
    }
    visited_mass += probabilities[j];
  }
  EXPECT_NEAR(visited_mass, 1.0, 1e-5);
  loose.patience = 3;
  stats = {};
  walk(head, 1, loose, &stats);
  EXPECT_EQ(stats.blocks_visited, 4) << "patience counts consecutive stable blocks after the first";
  loose.scale_criterion = EarlyExitScaleCriterion::kNorm;
  stats = {};
  walk(head, 1, loose, &stats);
  EXPECT_EQ(stats.blocks_visited, 4);
}

// A packed GQA group stops only when every head is stable: a head with flat attention over random
// keys never satisfies the mass criterion, so the group walks everything.
TEST(EarlyExitAttention, GroupStopsOnlyWhenEveryHeadIsStable) {
  const int n = 2048, d = 32;
  DecodeLikeHead head = decode_like_head(n, d, 1, 4);
  EarlyExitOptions defaults;
  EarlyExitWalkStats alone;
  walk(head, 1, defaults, &alone);
  EXPECT_LT(alone.blocks_visited, alone.blocks_total) << "the decode-like head stops early";
  // Second head: a query orthogonal-ish, tiny (flat softmax).
  std::vector<float> flat = test::random_vector(d, 99, 1e-3f);
  head.queries.insert(head.queries.end(), flat.begin(), flat.end());
  EarlyExitWalkStats group;
  walk(head, 2, defaults, &group);
  EXPECT_EQ(group.blocks_visited, group.blocks_total);
}

// With the default thresholds the error on decode-like attention stays within a measured bound,
// while most blocks are skipped; the bound is what the kernel achieved (max 9e-6 over these 40
// walks, 94% of the blocks skipped, under d_scale "mass" when written and again under "norm"),
// with ten times head-room.
TEST(EarlyExitAttention, DefaultsStayWithinAMeasuredErrorBound) {
  const int n = 4096, d = 64;
  EarlyExitOptions defaults;
  EarlyExitWalkStats stats;
  double worst = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const DecodeLikeHead head = decode_like_head(n, d, 1, 100 + trial);
    const std::vector<double> out = walk(head, 1, defaults, &stats);
    const std::vector<double> full = test::reference_attention(
        head.queries.data(), head.keys.data(), head.values.data(), d, test::all_indices(n));
    worst = std::max(worst, test::relative_l2(out, full));
  }
  RecordProperty("max_relative_error", std::to_string(worst));
  RecordProperty("skipped_fraction", std::to_string(stats.skipped_fraction()));
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(stats.skipped_fraction(), 0.5);
}

// Entries of walk blocks 0 .. last (sink block 0 .. sinks-1, then 64-entry blocks from the newest).
std::vector<int32_t> walked_entries(int n, int last, int sinks = 4, int block = 64) {
  std::vector<int32_t> entries;
  for (int j = 0; j < std::min(sinks, n); ++j) entries.push_back(j);
  for (int b = 1; b <= last; ++b)
    for (int j = std::max(sinks, n - b * block); j < n - (b - 1) * block; ++j) entries.push_back(j);
  return entries;
}

// Every reading of the trace against the running outputs recomputed from scratch in double (the
// attention over the blocks walked so far), and each block's share of the full softmax mass. The
// older blocks' logits are pushed down by 30 so that their readings are tiny (down to ~1e-13):
// 1 - cos from the naive 1 - <p, c> / (|p| |c|) would be float noise there.
TEST(EarlyExitWalkTrace, ReadingsMatchOutputsRecomputedFromScratch) {
  const int n = 600, d = 32, heads = 2;
  DecodeLikeHead head = decode_like_head(n, d, heads, 71);
  for (int j = 4; j < n - 200; ++j)
    for (int a = 0; a < heads; ++a)
      for (int t = 0; t < d; ++t)
        head.keys[j * d + t] -= 30.0f * head.queries[a * d + t] / heads / 8;
  EarlyExitOptions options;
  const EarlyExitWalkTrace trace = early_exit_walk_trace(walk_args(head, heads), options);
  ASSERT_EQ(trace.blocks, early_exit_block_count(n, options));
  ASSERT_EQ(trace.n_heads, heads);
  double smallest_direction = 1;
  for (int a = 0; a < heads; ++a) {
    const float* q = head.queries.data() + a * d;
    const auto output = [&](int last) {
      return test::reference_attention(q, head.keys.data(), head.values.data(), d,
                                       walked_entries(n, last));
    };
    const auto mass = [&](const std::vector<int32_t>& entries) {
      long double total = 0;
      for (int32_t j : entries) {
        long double dot = 0;
        for (int t = 0; t < d; ++t) dot += static_cast<long double>(q[t]) * head.keys[j * d + t];
        total += std::exp(dot / std::sqrt(static_cast<long double>(d)));
      }
      return total;
    };
    const std::vector<double> full = output(trace.blocks - 1);
    const long double full_mass = mass(test::all_indices(n));
    for (int b = 1; b < trace.blocks; ++b) {
      SCOPED_TRACE("head " + std::to_string(a) + " block " + std::to_string(b));
      const std::vector<double> previous = output(b - 1), current = output(b);
      long double pp = 0, cc = 0, pc = 0, dd = 0;
      for (int t = 0; t < d; ++t) {
        pp += static_cast<long double>(previous[t]) * previous[t];
        cc += static_cast<long double>(current[t]) * current[t];
        pc += static_cast<long double>(previous[t]) * current[t];
        dd += static_cast<long double>(current[t] - previous[t]) * (current[t] - previous[t]);
      }
      const std::vector<int32_t> before = walked_entries(n, b - 1), now = walked_entries(n, b);
      const std::vector<int32_t> added(now.begin() + before.size(), now.end());
      const double mass_ratio = static_cast<double>(mass(added) / mass(now));
      const double norm_ratio =
          static_cast<double>(std::fabs(std::sqrt(cc) - std::sqrt(pp)) / std::sqrt(pp));
      const double change_ratio = static_cast<double>(std::sqrt(dd) / std::sqrt(cc));
      const double direction = static_cast<double>(1 - pc / std::sqrt(pp * cc));
      const EarlyExitReadings& r = trace.readings[trace.at(b, a)];
      EXPECT_NEAR(r.mass, mass_ratio, 1e-3 * mass_ratio + 1e-9);
      EXPECT_NEAR(r.norm, norm_ratio, 2e-2 * norm_ratio + 5e-7);
      EXPECT_NEAR(r.change, change_ratio, 1e-3 * change_ratio + 5e-7);
      EXPECT_NEAR(r.direction, direction, 2e-2 * direction + 1e-13);
      smallest_direction = std::min(smallest_direction, direction);
      EXPECT_NEAR(trace.error[trace.at(b, a)], test::relative_l2(current, full), 1e-4);
      EXPECT_NEAR(trace.mass_share[trace.at(b, a)], static_cast<double>(mass(added) / full_mass),
                  1e-4);
    }
  }
  EXPECT_LT(smallest_direction, 1e-10)
      << "the inputs must reach readings below float's 1 - cos noise";
}

// early_exit_stop on a trace says what the walk does, for every reading, grouping and ablation;
// and each head's output is attention over the blocks up to its last folded block.
TEST(EarlyExitWalkTrace, StopOfTheTraceIsTheWalksStop) {
  int stopped_walks = 0, uneven_heads = 0;
  for (const auto scale : {EarlyExitScaleCriterion::kMass, EarlyExitScaleCriterion::kNorm,
                           EarlyExitScaleCriterion::kChange})
    for (const bool per_head : {false, true})
      for (const int terms : {0, 1, 2})
        for (int trial = 0; trial < 3; ++trial) {
          const int n = 900 + 211 * trial, d = 16, heads = 3;
          DecodeLikeHead head = decode_like_head(n, d, heads, 500 + trial);
          // Sharper heads 0 and 1 (queries x 4) and a flatter head 2 (x 1, 2, 3): its stops come
          // later.
          for (int t = 0; t < 2 * d; ++t) head.queries[t] *= 4.0f;
          for (int t = 0; t < d; ++t) head.queries[2 * d + t] *= 1.0f + trial;
          EarlyExitOptions options;
          options.scale_criterion = scale;
          options.per_head = per_head;
          options.use_scale = terms != 2;
          options.use_direction = terms != 1;
          options.tau = 3e-3f;  // loose enough that most of these walks stop
          const EarlyExitWalkTrace trace = early_exit_walk_trace(walk_args(head, heads), options);
          const EarlyExitStop stop = early_exit_stop(trace, options);
          EarlyExitWalkStats stats;
          const std::vector<double> out = walk(head, heads, options, &stats);
          SCOPED_TRACE("scale " + std::to_string(static_cast<int>(scale)) + " per_head " +
                       std::to_string(per_head) + " terms " + std::to_string(terms) + " trial " +
                       std::to_string(trial));
          EXPECT_EQ(stats.blocks_visited, stop.visited);
          stopped_walks += stop.visited < trace.blocks;
          std::set<int> lasts;
          for (int a = 0; a < heads; ++a) {
            const int last = stop.head_last_block[a];
            lasts.insert(last);
            EXPECT_LT(last, stop.visited);
            if (!per_head) {
              EXPECT_EQ(last, stop.visited - 1);
            }
            const std::vector<double> expected =
                test::reference_attention(head.queries.data() + a * d, head.keys.data(),
                                          head.values.data(), d, walked_entries(n, last));
            const std::vector<double> got(out.begin() + a * d, out.begin() + (a + 1) * d);
            EXPECT_LT(test::relative_l2(got, expected), 1e-5) << "head " << a;
          }
          uneven_heads += lasts.size() > 1;
        }
  EXPECT_GT(stopped_walks, 20) << "most walks must stop for the comparison to mean something";
  EXPECT_GT(uneven_heads, 0) << "per-head stops must differ between heads somewhere";
}

// With a decision window W the walk stops where the unlimited walk does when that is inside the
// window (stop block < W), and walks every block otherwise (the GPU decider's semantics); the
// trace's replay agrees.
TEST(EarlyExitAttention, DecisionWindowStopsOnlyInsideIt) {
  int inside = 0, outside = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const int n = 2048, d = 32;
    const DecodeLikeHead head = decode_like_head(n, d, 1, 700 + trial);
    EarlyExitOptions unlimited;
    EarlyExitWalkStats free_walk;
    walk(head, 1, unlimited, &free_walk);
    ASSERT_LT(free_walk.blocks_visited, free_walk.blocks_total) << "the decode-like head stops";
    const int stop_block = static_cast<int>(free_walk.blocks_visited) - 1;
    for (const int window : {stop_block, stop_block + 1, stop_block + 5}) {
      EarlyExitOptions windowed;
      windowed.decision_window = window;
      EarlyExitWalkStats stats;
      const std::vector<double> out = walk(head, 1, windowed, &stats);
      const EarlyExitWalkTrace trace = early_exit_walk_trace(walk_args(head, 1), windowed);
      EXPECT_EQ(early_exit_stop(trace, windowed).visited, stats.blocks_visited);
      if (stop_block < window) {
        ++inside;
        EXPECT_EQ(stats.blocks_visited, free_walk.blocks_visited) << "window " << window;
      } else {
        ++outside;
        EXPECT_EQ(stats.blocks_visited, stats.blocks_total) << "window " << window;
        const std::vector<double> full = test::reference_attention(
            head.queries.data(), head.keys.data(), head.values.data(), d, test::all_indices(n));
        EXPECT_LT(test::relative_l2(out, full), 1e-5);
      }
    }
  }
  EXPECT_EQ(inside, 12);
  EXPECT_EQ(outside, 6);
}

// The ablations only drop a condition, so they never stop later than the full test; the
// direction-only walk stops earlier on decode-like attention (the paper's "without d_scale").
TEST(EarlyExitAttention, AblationsStopNoLaterThanBothTerms) {
  int64_t both_visited = 0, direction_visited = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const DecodeLikeHead head = decode_like_head(2048, 32, 2, 900 + trial);
    EarlyExitOptions both;
    EarlyExitOptions scale_only = both, direction_only = both;
    scale_only.use_direction = false;
    direction_only.use_scale = false;
    EarlyExitWalkStats s_both, s_scale, s_direction;
    walk(head, 2, both, &s_both);
    walk(head, 2, scale_only, &s_scale);
    walk(head, 2, direction_only, &s_direction);
    EXPECT_LE(s_scale.blocks_visited, s_both.blocks_visited);
    EXPECT_LE(s_direction.blocks_visited, s_both.blocks_visited);
    both_visited += s_both.blocks_visited;
    direction_visited += s_direction.blocks_visited;
  }
  EXPECT_LT(direction_visited, both_visited);
}

TEST(EarlyExitOracle, TraceAgreesWithTheWalkAndSummaryAddsUp) {
  EarlyExitOptions defaults;
  EarlyExitOracleSummary summary;
  const float tolerance = 1e-3f;
  int64_t skippable = 0, blocks = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1024 + 37 * trial;
    const DecodeLikeHead head = decode_like_head(n, 32, 1, 300 + trial);
    const EarlyExitOracleTrace trace =
        early_exit_oracle_trace(walk_args(head, 1), defaults, tolerance);
    ASSERT_EQ(trace.relative_error.size(), static_cast<size_t>(trace.blocks_total));
    EXPECT_EQ(trace.relative_error.back(), 0.0f) << "the full walk is the oracle's reference";
    EarlyExitWalkStats stats;
    const std::vector<double> out = walk(head, 1, defaults, &stats);
    const int stop = trace.probe_stop_block < 0 ? trace.blocks_total - 1 : trace.probe_stop_block;
    EXPECT_EQ(stats.blocks_visited, stop + 1);
    EXPECT_GE(trace.oracle_stop_block, 0);
    // The safe stop: every block from it on is within the tolerance, the one before it is not.
    ASSERT_GE(trace.safe_stop_block, trace.oracle_stop_block);
    for (int b = trace.safe_stop_block; b < trace.blocks_total; ++b)
      EXPECT_LT(trace.relative_error[b], tolerance);
    if (trace.safe_stop_block > 0) {
      EXPECT_GE(trace.relative_error[trace.safe_stop_block - 1], tolerance);
    }
    skippable += trace.blocks_total - 1 - trace.safe_stop_block;
    blocks += trace.blocks_total;
    summary.add(trace, tolerance);
  }
  EXPECT_EQ(summary.walks, 20);
  EXPECT_EQ(summary.blocks, blocks);
  EXPECT_EQ(summary.safely_skippable_blocks, skippable);
  EXPECT_GT(summary.safely_skippable_fraction(), 0.0);
  EarlyExitOracleSummary merged;
  merged.add(summary);
  EXPECT_EQ(merged.blocks, summary.blocks);
  EXPECT_EQ(merged.safely_skippable_blocks, summary.safely_skippable_blocks);
  EXPECT_EQ(summary.agreements + summary.false_positives + summary.false_negatives,
            summary.boundaries);
  EXPECT_LE(summary.premature_stops, summary.probe_stops);
}

TEST(ArtParams, DefaultsAndBadParameters) {
  const EarlyExitParams defaults = make_art_params(nlohmann::json::object());
  EXPECT_FLOAT_EQ(defaults.tau, 1e-5f);
  EXPECT_FLOAT_EQ(defaults.phi, 1e-3f);
  EXPECT_EQ(defaults.patience, 2);
  EXPECT_TRUE(defaults.enabled);
  EXPECT_EQ(defaults.scale_criterion, "norm");
  EXPECT_TRUE(defaults.use_scale && defaults.use_direction && !defaults.per_head);
  const EarlyExitParams custom = make_art_params(
      {{"patience", 4}, {"scale_criterion", "change"}, {"terms", "direction"}, {"stop", "head"}});
  EXPECT_EQ(custom.patience, 4);
  EXPECT_EQ(custom.scale_criterion, "change");
  EXPECT_FALSE(custom.use_scale);
  EXPECT_TRUE(custom.use_direction);
  EXPECT_TRUE(custom.per_head);
  EXPECT_FALSE(make_art_params({{"terms", "scale"}}).use_direction);
  EXPECT_EQ(describe_art_params(custom)["terms"], "direction");
  EXPECT_EQ(describe_art_params(custom)["stop"], "head");
  EXPECT_THROW(make_art_params({{"terms", "neither"}}), InputError);
  EXPECT_THROW(make_art_params({{"stop", "layer"}}), InputError);
  EXPECT_EQ(make_art_params({{"decision_window", 6}}).decision_window, 6);
  EXPECT_THROW(make_art_params({{"decision_window", -1}}), InputError);
  EXPECT_THROW(make_art_params({{"patience", 0}}), InputError);
  EXPECT_THROW(make_art_params({{"tau", -1}}), InputError);
  EXPECT_THROW(make_art_params({{"scale_criterion", "energy"}}), InputError);
  EXPECT_THROW(make_art_params({{"patiense", 2}}), InputError);
}

}  // namespace
}  // namespace kvb

namespace kvb {
namespace {

TEST(ArtRegistry, ComposesWithAnyPolicyByName) {
  const CachePlan full_art = make_cache_plan("full+art", nlohmann::json::object(), std::nullopt);
  ASSERT_TRUE(full_art.early_exit.has_value());
  EXPECT_FALSE(full_art.prefill);
  const CachePlan snapkv_art =
      make_cache_plan("snapkv+art", {{"art", {{"patience", 4}}}}, Budget::parse("10%"));
  ASSERT_TRUE(snapkv_art.early_exit.has_value());
  EXPECT_EQ(snapkv_art.early_exit->patience, 4);
  EXPECT_TRUE(snapkv_art.prefill);
  const CachePlan quest_art =
      make_cache_plan("quest+art", nlohmann::json::object(), Budget::parse("64"));
  EXPECT_TRUE(quest_art.selector && quest_art.early_exit);
  EXPECT_TRUE(make_cache_plan("streamingllm+art", nlohmann::json::object(), Budget::parse("64"))
                  .early_exit);
  EXPECT_THROW(make_cache_plan("full+art", {{"art", {{"patience", 0}}}}, std::nullopt), InputError);
  EXPECT_THROW(make_cache_plan("quest", nlohmann::json::object(), std::nullopt), InputError);
  EXPECT_THROW(make_cache_plan("quest+topk", nlohmann::json::object(), Budget::parse("64")),
               InputError);
}

}  // namespace
}  // namespace kvb

// ART inside generation on a tiny random model (tests/engine/tiny_model.h).
namespace kvb {
namespace {

std::vector<TokenId> tiny_prompt(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> ids(n);
  for (TokenId& id : ids) id = static_cast<TokenId>(rng() % vocab);
  return ids;
}

GenerationResult generate_with(const std::string& policy, const nlohmann::json& params,
                               std::optional<Budget> budget) {
  static const ModelWeights weights = test::tiny_model(test::TinyShape{}, 31);
  CpuEngine engine(weights);
  Generator generator(engine, nullptr);
  CachePlan plan = make_cache_plan(policy, params, budget);
  GenerationOptions options;
  options.max_new_tokens = 6;
  return generator.generate(tiny_prompt(150, weights.config.vocab_size, 7), plan, options);
}

TEST(ArtGeneration, ZeroThresholdsGenerateLikeFullAndCountEveryBlock) {
  const GenerationResult full = generate_with("full", nlohmann::json::object(), std::nullopt);
  EXPECT_EQ(full.kv_blocks_total, 0);
  const nlohmann::json strict = {{"art", {{"tau", 0}, {"phi", 0}, {"block_size", 16}}}};
  const GenerationResult art = generate_with("full+art", strict, std::nullopt);
  EXPECT_EQ(art.output_ids, full.output_ids);
  // 5 decode steps x 2 layers x 2 KV groups, each over 1 + ceil((T - 4) / 16) blocks.
  int64_t expected_blocks = 0;
  for (int step = 0; step < 5; ++step)
    expected_blocks += 2 * 2 * (1 + (150 + step + 1 - 4 + 15) / 16);
  EXPECT_EQ(art.kv_blocks_total, expected_blocks);
  EXPECT_EQ(art.kv_blocks_visited, art.kv_blocks_total);
  // The same with a selector: TOPK at 100% attends to everything.
  const nlohmann::json topk_strict = {{"art", strict["art"]}};
  EXPECT_EQ(generate_with("topk+art", topk_strict, Budget::parse("100%")).output_ids,
            full.output_ids);
}

TEST(ArtGeneration, LooseThresholdsSkipBlocksAndOracleModeCountsEveryWalk) {
  const nlohmann::json loose = {{"art",
                                 {{"tau", 10},
                                  {"phi", 10},
                                  {"patience", 1},
                                  {"block_size", 16},
                                  {"oracle_tolerance", 1e-3}}}};
  const GenerationResult art = generate_with("full+art", loose, std::nullopt);
  EXPECT_EQ(art.kv_blocks_visited, 5 * 2 * 2 * 2) << "sink block + most recent block per walk";
  EXPECT_EQ(art.early_exit_oracle.walks, 5 * 2 * 2);
  EXPECT_EQ(art.early_exit_oracle.probe_stops, 5 * 2 * 2);
  // With StreamingLLM the walk covers the compressed cache only.
  const GenerationResult streaming =
      generate_with("streamingllm+art", {{"art", loose["art"]}}, Budget::parse("40"));
  EXPECT_LT(streaming.kv_blocks_total, art.kv_blocks_total);
  EXPECT_EQ(
      generate_with("quest+art", {{"art", loose["art"]}}, Budget::parse("32")).output_ids.size(),
      6u);
}

}  // namespace
}  // namespace kvb
