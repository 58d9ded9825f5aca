// The few SVG pieces wedge's charts share (`wedge plot`, `wedge depsim --plot`): a framed
// panel of polylines on linear or logarithmic axes with round-number ticks and axis titles,
// a legend entry, the document's opening. Self-contained SVG text, no plotting library;
// titles, axis titles and legend labels are escaped here, so callers pass plain text.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace wedge::tools {

using Curve = std::vector<std::pair<double, double>>;  // (x, y) points, drawn in order

struct ChartAxes {
  std::string x_label = "step";  // the axis titles, below the panel and left of it (rotated)
  std::string y_label;
  bool log_x = false;  // log axes drop points <= 0
  bool log_y = false;
  bool integer_x = false;  // x counts something (steps, epochs): no ticks between whole numbers
};

// ---- ticks: small pure functions, so the rules can be tested by hand -----------------------

// The range an axis shows for data in [lo, hi]. A real range is returned as it is; a single
// value v (lo == hi, or a difference lost in rounding) is widened around v so that it sits in
// the middle with distinct ticks on both sides: on a linear axis by half the power of ten
// below |v| (30 -> [25, 35], 0.5 -> [0.45, 0.55]), by at least 1 when `integers` (1 -> [0, 2]),
// and 0 -> [-1, 1]; on a log axis (v > 0) by a factor 1.5 either way.
std::pair<double, double> axis_range(double lo, double hi, bool log = false, bool integers = false);

// Linear ticks: the multiples inside [lo, hi] of a step from 1-2-5 x 10^k (..., 0.1, 0.2, 0.5,
// 1, 2, 5, 10, ...), the step chosen so the count is about `target`: among the steps giving
// target - 1 to target + 2 ticks (4 to 7 for the default 5) the count nearest `target`, on a
// tie the fewer; if there is none (the counts jump from 3 to 8), the fewest above that range
// if they are at most target + 3, else the most below it (an integer axis over a short range
// has only those).
// `integers`: no step below 1. A degenerate range is first widened by axis_range. Ascending;
// -0 is 0. (0.37, 6.2) -> 1, 2, ..., 6; (0, 1430) -> 0, 200, ..., 1400.
std::vector<double> nice_ticks(double lo, double hi, int target = 5, bool integers = false);

// Log ticks for lo, hi > 0 (data units, not exponents): the numbers 1, 2 and 5 x 10^k inside
// [lo, hi] when there are 3 to target + 3 of them; more than that (the range spans many
// decades): the powers of ten inside, every 2nd, 5th, 10th, ... one so that at most target + 2
// remain; fewer than 3 (the range is under about a decade): nice_ticks(lo, hi, target) instead,
// evenly spaced numbers that still end in a 1, 2 or 5 step (403 .. 1430 -> 600, 800, ..., 1400).
std::vector<double> nice_log_ticks(double lo, double hi, int target = 5);

// One tick's label, plain text, with as many decimals as `step` (the distance to the next
// tick) needs and no trailing zeros: tick_label(1.0, 0.2) == "1", tick_label(0.35, 0.05) ==
// "0.35". Thousands are grouped with commas (1000 -> "1,000", 12500 -> "12,500"). Numbers of
// 10 million or more, or under 0.0001 (but 0), are written m e k ("2e7", "1.5e-5").
std::string tick_label(double value, double step);

// The labels of one axis' ticks, formatted alike: evenly spaced ticks with their common step;
// otherwise (1-2-5 or powers of ten on a log axis) each tick with the precision of its own
// leading digit ("0.02", "0.05", "0.1", "0.2", "1,000").
std::vector<std::string> tick_labels(const std::vector<double>& ticks);

// ---- drawing ----------------------------------------------------------------------------------

// The colour of curve k (eight, then they repeat).
const char* chart_color(std::size_t k);

// `<svg ...>` with a white background, width x height pixels (close it with "</svg>\n").
std::string svg_open(double width, double height);

// Whether chart_panel would draw any point of these curves on these axes (finite, and > 0
// on a log axis).
bool has_points(const std::vector<Curve>& curves, const ChartAxes& axes);

// A framed panel at (x0, y0) of w x h pixels, one <g class="panel"> whose tick labels have
// class "tick-x" / "tick-y" and axis titles "axis-title-x" / "axis-title-y": title above, grid and tick labels (nice_ticks /
// nice_log_ticks, thinned where labels would touch; a log axis of powers of ten beyond the
// plainly written numbers is labelled 10^k), the axis titles below and left (which need about
// 40 px under the frame and 70 px left of it), curve k in chart_color(k) with dots when it has
// at most 60 points (a single point is a dot); "no data" when nothing is drawable.
void chart_panel(std::string& svg, double x0, double y0, double w, double h, const std::string& title,
                 const std::vector<Curve>& curves, const ChartAxes& axes);

// A legend entry: a short bar in chart_color(k) and the label, its baseline at y.
void chart_legend_entry(std::string& svg, double x, double y, std::size_t k, const std::string& label);

// The width in pixels a text of this many characters takes at font-size 13 (legend) — an
// estimate for layout, generous for sans-serif.
double legend_text_width(const std::string& label);

}  // namespace wedge::tools
