// Inline SVG charts for the HTML report: line charts over a categorical x axis and heatmaps.
// Plain strings with no scripts or external references, so a report opens offline anywhere.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace kvb::svg {

struct Series {
  std::string name;
  std::vector<double> values;  // one per x label; NaN leaves a gap
  bool dashed = false;         // reference lines (Full KV)
};

struct LineChart {
  std::string id;    // element id, unique in the page
  std::string kind;  // data-plot attribute, e.g. "accuracy-vs-budget"
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<std::string> x_ticks;
  std::vector<Series> series;
  double y_min = NAN;  // NaN: from the data
  double y_max = NAN;
};
std::string render(const LineChart& chart);

struct Heatmap {
  std::string id;
  std::string kind;
  std::string title;
  std::string x_label;  // context length
  std::string y_label;  // depth
  std::vector<std::string> x_ticks;
  std::vector<std::string> y_ticks;
  std::vector<std::vector<double>> values;  // [y][x] in [0, 1]; NaN = no data
};
std::string render(const Heatmap& map);

// The NIAH colour map of KVCache-Factory's visualize.py: red #F0496E, yellow #EBB839 and green
// #0CD79F, linear in between (docs/benchmarks.md §2.4).
std::string heat_colour(double value01);
std::string escape_xml(const std::string& text);

}  // namespace kvb::svg
