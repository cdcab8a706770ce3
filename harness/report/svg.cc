#include "harness/report/svg.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kvb::svg {
namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                          "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

std::string number(double v) {
  std::ostringstream out;
  out.precision(4);
  out << v;
  return out.str();
}

// Round axis limits to a readable step.
double nice_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * magnitude) return m * magnitude;
  return 10 * magnitude;
}

}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string heat_colour(double v) {
  if (!std::isfinite(v)) return "#dddddd";
  v = std::clamp(v, 0.0, 1.0);
  const int stops[3][3] = {{0xF0, 0x49, 0x6E}, {0xEB, 0xB8, 0x39}, {0x0C, 0xD7, 0x9F}};
  const int segment = v < 0.5 ? 0 : 1;
  const double t = v < 0.5 ? v / 0.5 : (v - 0.5) / 0.5;
  char buffer[8];
  int rgb[3];
  for (int i = 0; i < 3; ++i)
    rgb[i] = static_cast<int>(
        std::lround(stops[segment][i] + t * (stops[segment + 1][i] - stops[segment][i])));
  std::snprintf(buffer, sizeof buffer, "#%02X%02X%02X", rgb[0], rgb[1], rgb[2]);
  return buffer;
}

std::string render(const LineChart& chart) {
  constexpr double kWidth = 560, kHeight = 320, kLeft = 60, kRight = 170, kTop = 34, kBottom = 50;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  double lo = chart.y_min, hi = chart.y_max;
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    double data_lo = INFINITY, data_hi = -INFINITY;
    for (const auto& s : chart.series)
      for (const double v : s.values)
        if (std::isfinite(v)) {
          data_lo = std::min(data_lo, v);
          data_hi = std::max(data_hi, v);
        }
    if (!std::isfinite(data_lo)) data_lo = 0, data_hi = 1;
    if (!std::isfinite(lo)) lo = std::min(0.0, data_lo);
    if (!std::isfinite(hi)) hi = data_hi > lo ? data_hi * 1.05 : lo + 1;
  }
  const double step = nice_step(hi - lo);
  hi = std::ceil(hi / step - 1e-9) * step;
  const size_t n = chart.x_ticks.size();
  auto x_at = [&](size_t i) { return kLeft + (n <= 1 ? plot_w / 2 : plot_w * i / (n - 1)); };
  auto y_at = [&](double v) { return kTop + plot_h * (1 - (v - lo) / (hi - lo)); };

  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" id=\"" << escape_xml(chart.id)
      << "\" data-plot=\"" << escape_xml(chart.kind) << "\" width=\"" << kWidth << "\" height=\""
      << kHeight << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" role=\"img\">\n";
  out << "<title>" << escape_xml(chart.title) << "</title>\n";
  out << "<text x=\"" << kWidth / 2 << "\" y=\"20\" text-anchor=\"middle\" class=\"t\">"
      << escape_xml(chart.title) << "</text>\n";
  for (double v = lo; v <= hi + 1e-9; v += step) {
    out << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w << "\" y1=\"" << y_at(v)
        << "\" y2=\"" << y_at(v) << "\" class=\"grid\"/>";
    out << "<text x=\"" << kLeft - 6 << "\" y=\"" << y_at(v) + 4
        << "\" text-anchor=\"end\" class=\"tick\">" << number(v) << "</text>\n";
  }
  for (size_t i = 0; i < n; ++i)
    out << "<text x=\"" << x_at(i) << "\" y=\"" << kTop + plot_h + 16
        << "\" text-anchor=\"middle\" class=\"tick\">" << escape_xml(chart.x_ticks[i])
        << "</text>\n";
  out << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << kTop << "\" y2=\""
      << kTop + plot_h << "\" class=\"axis\"/><line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w
      << "\" y1=\"" << kTop + plot_h << "\" y2=\"" << kTop + plot_h << "\" class=\"axis\"/>\n";
  out << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << kHeight - 8
      << "\" text-anchor=\"middle\" class=\"label\">" << escape_xml(chart.x_label) << "</text>\n";
  out << "<text transform=\"translate(14," << kTop + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">" << escape_xml(chart.y_label)
      << "</text>\n";
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const Series& series = chart.series[s];
    const std::string colour = kPalette[s % std::size(kPalette)];
    out << "<g class=\"series\" data-series=\"" << escape_xml(series.name) << "\">";
    std::string path;
    bool pen_down = false;
    for (size_t i = 0; i < series.values.size() && i < n; ++i) {
      const double v = series.values[i];
      if (!std::isfinite(v)) {
        pen_down = false;
        continue;
      }
      path += (pen_down ? " L" : " M") + number(x_at(i)) + " " + number(y_at(v));
      pen_down = true;
    }
    if (!path.empty())
      out << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << colour
          << "\" stroke-width=\"2\"" << (series.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>";
    for (size_t i = 0; i < series.values.size() && i < n; ++i) {
      if (!std::isfinite(series.values[i])) continue;
      out << "<circle cx=\"" << x_at(i) << "\" cy=\"" << y_at(series.values[i])
          << "\" r=\"3.5\" fill=\"" << colour << "\"><title>" << escape_xml(series.name) << " @ "
          << escape_xml(chart.x_ticks[i]) << ": " << number(series.values[i])
          << "</title></circle>";
    }
    const double ly = kTop + 8 + 16 * s;
    out << "<line x1=\"" << kWidth - kRight + 12 << "\" x2=\"" << kWidth - kRight + 32 << "\" y1=\""
        << ly << "\" y2=\"" << ly << "\" stroke=\"" << colour << "\" stroke-width=\"2\""
        << (series.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/><text x=\""
        << kWidth - kRight + 36 << "\" y=\"" << ly + 4 << "\" class=\"legend\">"
        << escape_xml(series.name.substr(0, 24)) << "</text></g>\n";
  }
  out << "</svg>\n";
  return out.str();
}

std::string render(const Heatmap& map) {
  constexpr double kLeft = 70, kTop = 34, kCell = 34, kBottom = 50, kLegend = 70;
  const double cell_w = std::max(kCell, 300.0 / std::max<size_t>(1, map.x_ticks.size()));
  const double width = kLeft + cell_w * map.x_ticks.size() + kLegend;
  const double height = kTop + kCell * map.y_ticks.size() + kBottom;
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot heatmap\" id=\""
      << escape_xml(map.id) << "\" data-plot=\"" << escape_xml(map.kind) << "\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
      << "\" role=\"img\">\n<title>" << escape_xml(map.title) << "</title>\n";
  out << "<text x=\"" << width / 2 << "\" y=\"20\" text-anchor=\"middle\" class=\"t\">"
      << escape_xml(map.title) << "</text>\n";
  for (size_t y = 0; y < map.y_ticks.size(); ++y) {
    out << "<text x=\"" << kLeft - 6 << "\" y=\"" << kTop + kCell * y + kCell / 2 + 4
        << "\" text-anchor=\"end\" class=\"tick\">" << escape_xml(map.y_ticks[y]) << "</text>";
    for (size_t x = 0; x < map.x_ticks.size(); ++x) {
      const double v = y < map.values.size() && x < map.values[y].size() ? map.values[y][x] : NAN;
      out << "<rect class=\"cell\" x=\"" << kLeft + cell_w * x << "\" y=\"" << kTop + kCell * y
          << "\" width=\"" << cell_w - 1 << "\" height=\"" << kCell - 1 << "\" fill=\""
          << heat_colour(v) << "\"><title>depth " << escape_xml(map.y_ticks[y]) << "%, "
          << escape_xml(map.x_ticks[x])
          << " tokens: " << (std::isfinite(v) ? number(100 * v) : std::string("no data"))
          << "</title></rect>";
    }
    out << "\n";
  }
  for (size_t x = 0; x < map.x_ticks.size(); ++x)
    out << "<text x=\"" << kLeft + cell_w * x + cell_w / 2 << "\" y=\""
        << kTop + kCell * map.y_ticks.size() + 16 << "\" text-anchor=\"middle\" class=\"tick\">"
        << escape_xml(map.x_ticks[x]) << "</text>";
  out << "\n<text x=\"" << kLeft + cell_w * map.x_ticks.size() / 2 << "\" y=\"" << height - 8
      << "\" text-anchor=\"middle\" class=\"label\">" << escape_xml(map.x_label) << "</text>";
  out << "<text transform=\"translate(14," << kTop + kCell * map.y_ticks.size() / 2
      << ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">" << escape_xml(map.y_label)
      << "</text>\n";
  // Colour scale: 0 at the bottom, 100 at the top.
  const double lx = kLeft + cell_w * map.x_ticks.size() + 16;
  const double scale_h = std::max(kCell * map.y_ticks.size(), 60.0);
  for (int i = 0; i < 10; ++i)
    out << "<rect x=\"" << lx << "\" y=\"" << kTop + scale_h * (9 - i) / 10 << "\" width=\"12\" "
        << "height=\"" << scale_h / 10 + 0.5 << "\" fill=\"" << heat_colour((i + 0.5) / 10)
        << "\"/>";
  out << "<text x=\"" << lx + 16 << "\" y=\"" << kTop + 8 << "\" class=\"tick\">100</text>"
      << "<text x=\"" << lx + 16 << "\" y=\"" << kTop + scale_h << "\" class=\"tick\">0</text>\n";
  out << "</svg>\n";
  return out.str();
}

}  // namespace kvb::svg
