#include "harness/stats.h"

#include <cmath>

namespace kvb {

double student_t95(int df) {
  // Two-sided 97.5% quantiles of Student's t (standard tables), df = 1..30.
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                      2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                      2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                      2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) return NAN;
  if (df <= 30) return kTable[df - 1];
  if (df <= 40) return 2.021;
  if (df <= 60) return 2.000;
  if (df <= 120) return 1.980;
  return 1.960;
}

MeanCi mean_ci(const std::vector<double>& values) {
  MeanCi out;
  out.n = static_cast<int>(values.size());
  if (values.empty()) return out;
  double sum = 0;
  for (const double v : values) sum += v;
  out.mean = sum / out.n;
  if (out.n < 2) return out;
  double squares = 0;
  for (const double v : values) squares += (v - out.mean) * (v - out.mean);
  const double sd = std::sqrt(squares / (out.n - 1));
  out.half_width = student_t95(out.n - 1) * sd / std::sqrt(static_cast<double>(out.n));
  return out;
}

}  // namespace kvb
