// The few SVG pieces wedge's charts share (`wedge plot`, `wedge depsim --plot`): a framed
// panel of polylines on linear or logarithmic axes, a legend entry, the document's opening.
// Self-contained SVG text, no plotting library; titles, axis labels and legend labels are
// escaped here, so callers pass plain text.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace wedge::tools {

using Curve = std::vector<std::pair<double, double>>;  // (x, y) points, drawn in order

struct ChartAxes {
  std::string x_label = "step";
  std::string y_label;  // drawn vertically left of the panel when not empty
  bool log_x = false;   // log axes drop points <= 0 and tick at powers of ten
  bool log_y = false;
};

// The colour of curve k (eight, then they repeat).
const char* chart_color(std::size_t k);

// `<svg ...>` with a white background, width x height pixels (close it with "</svg>\n").
std::string svg_open(double width, double height);

// A framed panel at (x0, y0) of w x h pixels: title above, grid and tick labels, curve k in
// chart_color(k) (with dots when it has at most 60 points); "no data" when nothing is finite.
void chart_panel(std::string& svg, double x0, double y0, double w, double h, const std::string& title,
                 const std::vector<Curve>& curves, const ChartAxes& axes);

// A legend entry: a short bar in chart_color(k) and the label, its baseline at y.
void chart_legend_entry(std::string& svg, double x, double y, std::size_t k, const std::string& label);

}  // namespace wedge::tools
