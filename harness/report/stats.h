// Small statistics for tables and plots: the mean with a 95% interval that stays inside the
// score range. Scores that are all 0 or 1 (exact match, NIAH hits) get Wilson's score interval;
// other scores Student's t interval clipped to the range. Below kMinIntervalSamples no interval.
#pragma once

#include <string>
#include <vector>

namespace kvb {

// With 2 samples Student's t has one degree of freedom (t = 12.7): the interval says nothing a
// reader can use, so a cell shows n instead.
constexpr int kMinIntervalSamples = 3;

struct MeanCi {
  int n = 0;
  double mean = 0;
  bool has_interval = false;  // n >= kMinIntervalSamples
  double low = 0;             // 95% interval, inside [range_low, range_high]; = mean without one
  double high = 0;
  bool wilson = false;  // every value was range_low or range_high
};

// Two-sided 95% critical value of Student's t with `df` degrees of freedom (df >= 1).
double student_t95(int df);
// The mean of `values` (each within [range_low, range_high]) and its 95% interval.
MeanCi mean_ci(const std::vector<double>& values, double range_low = 0, double range_high = 1);

// Below this many samples a table shows the interval next to the mean: with few samples a single
// flipped answer moves a score by several points (kvpress #83), and readers should see that.
constexpr int kShowCiBelow = 100;

// `value` with `digits` decimals, as the tables and the regression report print it; "-" when it is
// not finite (a cell with no score).
std::string fixed(double value, int digits);

}  // namespace kvb
