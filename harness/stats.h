// Small statistics for tables and plots: mean with a 95% confidence interval (Student t).
#pragma once

#include <vector>

namespace kvb {

struct MeanCi {
  int n = 0;
  double mean = 0;
  double half_width = 0;  // 95% CI half width; 0 when n < 2
};

// Two-sided 95% critical value of Student's t with `df` degrees of freedom (df >= 1).
double student_t95(int df);
MeanCi mean_ci(const std::vector<double>& values);

// Below this many samples a table shows the interval next to the mean: with few samples a single
// flipped answer moves a score by several points (kvpress #83), and readers should see that.
constexpr int kShowCiBelow = 100;

}  // namespace kvb
