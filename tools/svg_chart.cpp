#include "tools/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/core.h>

namespace wedge::tools {

namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

struct Tick {
  double at;          // in the axis' (possibly log10) coordinate
  std::string label;  // SVG text content
};

// Five evenly spaced ticks, or on a log axis spanning three decades or more one tick per
// power of ten (labelled 10^k) — round numbers where the eye needs them.
std::vector<Tick> ticks(double lo, double hi, bool log, const char* linear_format) {
  std::vector<Tick> out;
  if (log && std::floor(hi) - std::ceil(lo) >= 2) {
    for (double k = std::ceil(lo); k <= hi; k += 1)
      out.push_back({k, fmt::format(R"(10<tspan dy="-6" font-size="9">{:.0f}</tspan>)", k)});
    return out;
  }
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4.0;
    out.push_back({v, fmt::format(fmt::runtime(linear_format), log ? std::pow(10.0, v) : v)});
  }
  return out;
}

// Text as SVG character data: a label may hold '<' or '&' (a run folder's name, "s < t").
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

const char* chart_color(std::size_t k) { return kColors[k % 8]; }

std::string svg_open(double width, double height) {
  return fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif">)"
                     "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
                     width, height);
}

void chart_panel(std::string& svg, double x0, double y0, double w, double h, const std::string& title,
                 const std::vector<Curve>& curves, const ChartAxes& axes) {
  auto usable = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!axes.log_x || x > 0) && (!axes.log_y || y > 0);
  };
  auto tx = [&](double x) { return axes.log_x ? std::log10(x) : x; };
  auto ty = [&](double y) { return axes.log_y ? std::log10(y) : y; };
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (auto& c : curves)
    for (auto& [x, y] : c) {
      if (!usable(x, y)) continue;
      xmin = std::min(xmin, tx(x)), xmax = std::max(xmax, tx(x)), ymin = std::min(ymin, ty(y)), ymax = std::max(ymax, ty(y));
    }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>)"
                     "\n",
                     x0, y0 - 10, escaped(title));
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>)"
                     "\n",
                     x0, y0, w, h);
  if (!std::isfinite(xmin)) {
    svg += fmt::format(R"(<text x="{}" y="{}" font-size="12">no data</text>)"
                       "\n",
                       x0 + w / 2 - 25, y0 + h / 2);
    return;
  }
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax == ymin) ymax = ymin + 1;
  const double pad = 0.05 * (ymax - ymin);
  ymin -= pad, ymax += pad;
  auto px = [&](double x) { return x0 + (tx(x) - xmin) / (xmax - xmin) * w; };
  auto py = [&](double y) { return y0 + h - (ty(y) - ymin) / (ymax - ymin) * h; };
  for (const Tick& t : ticks(ymin, ymax, axes.log_y, "{:.3g}")) {  // horizontal grid and y labels
    const double ypix = y0 + h - (t.at - ymin) / (ymax - ymin) * h;
    svg += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#ddd"/>)"
                       R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)"
                       "\n",
                       x0, ypix, x0 + w, ypix, x0 - 4, ypix + 4, t.label);
  }
  for (const Tick& t : ticks(xmin, xmax, axes.log_x, "{:.0f}")) {  // x labels (and grid on a log axis)
    const double xpix = x0 + (t.at - xmin) / (xmax - xmin) * w;
    if (axes.log_x)
      svg += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#ddd"/>)", xpix, y0, xpix, y0 + h);
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{}</text>)"
                       "\n",
                       xpix, y0 + h + 15, t.label);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>)"
                     "\n",
                     x0 + w / 2, y0 + h + 30, escaped(axes.x_label));
  if (!axes.y_label.empty())
    svg += fmt::format(R"svg(<text x="{}" y="{}" font-size="11" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>)svg"
                       "\n",
                       x0 - 48, y0 + h / 2, x0 - 48, y0 + h / 2, escaped(axes.y_label));
  for (std::size_t k = 0; k < curves.size(); ++k) {
    std::string pts;
    for (auto& [x, y] : curves[k])
      if (usable(x, y)) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    svg += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"/>)"
                       "\n",
                       chart_color(k), pts);
    if (curves[k].size() <= 60)
      for (auto& [x, y] : curves[k])
        if (usable(x, y))
          svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", px(x), py(y), chart_color(k));
  }
}

void chart_legend_entry(std::string& svg, double x, double y, std::size_t k, const std::string& label) {
  svg += fmt::format(R"(<rect x="{}" y="{}" width="18" height="4" fill="{}"/><text x="{}" y="{}" font-size="13">{}</text>)"
                     "\n",
                     x, y - 5, chart_color(k), x + 24, y, escaped(label));
}

}  // namespace wedge::tools
