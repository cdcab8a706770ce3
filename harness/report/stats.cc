#include "harness/report/stats.h"

#include <algorithm>
#include <cmath>
#include <sstream>

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

MeanCi mean_ci(const std::vector<double>& values, double range_low, double range_high) {
  MeanCi out;
  out.n = static_cast<int>(values.size());
  if (values.empty()) return out;
  double sum = 0;
  bool binary = true;
  for (const double v : values) {
    sum += v;
    binary = binary && (v == range_low || v == range_high);
  }
  out.mean = sum / out.n;
  out.low = out.high = out.mean;
  if (out.n < kMinIntervalSamples) return out;
  out.has_interval = true;
  const double n = out.n;
  const double width = range_high - range_low;
  if (binary && width > 0) {
    // Wilson score interval of the share p of values at range_high (z = 1.96).
    constexpr double z = 1.959964;
    const double p = (out.mean - range_low) / width;
    const double denominator = 1 + z * z / n;
    const double centre = (p + z * z / (2 * n)) / denominator;
    const double half = z / denominator * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n));
    out.wilson = true;
    out.low = range_low + width * std::max(0.0, centre - half);
    out.high = range_low + width * std::min(1.0, centre + half);
    return out;
  }
  double squares = 0;
  for (const double v : values) squares += (v - out.mean) * (v - out.mean);
  const double half = student_t95(out.n - 1) * std::sqrt(squares / (n - 1)) / std::sqrt(n);
  out.low = std::max(range_low, out.mean - half);
  out.high = std::min(range_high, out.mean + half);
  return out;
}

std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return "-";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

}  // namespace kvb
