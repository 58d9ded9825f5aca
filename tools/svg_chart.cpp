#include "tools/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include <fmt/core.h>

namespace wedge::tools {

namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

// m x 10^k computed so that the decimal numbers come out as the nearest double (2 / 10, not
// 2 * 0.1): the ticks compare equal to the literals a reader would write.
double scaled(double m, int k) { return k >= 0 ? m * std::pow(10.0, k) : m / std::pow(10.0, -k); }

// The decimals a step needs: the fewest that write it (to 0.1 % of itself: a step measured
// as the difference of two ticks carries their rounding), at most 12.
int decimals_for(double step) {
  for (int d = 0; d < 12; ++d) {
    const double scaledstep = step * std::pow(10.0, d);
    if (std::abs(scaledstep - std::round(scaledstep)) <= 1e-3 * scaledstep) return d;
  }
  return 12;
}

std::string trim_zeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// Digits of the integer part grouped by three with commas: "-12345.5" -> "-12,345.5".
std::string grouped(const std::string& s) {
  const std::size_t begin = (s[0] == '-') ? 1 : 0;
  std::size_t end = s.find('.');
  if (end == std::string::npos) end = s.size();
  std::string out = s.substr(0, begin);
  for (std::size_t i = begin; i < end; ++i) {
    if (i > begin && (end - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out + s.substr(end);
}

// Whether an axis' labels are written m e k: numbers too long or too small to write plainly.
bool needs_exponent(double value) { return std::abs(value) >= 1e7 || (value != 0 && std::abs(value) < 1e-4); }

std::string format_tick(double value, double step, bool exponent) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  step = std::abs(step);
  if (!(step > 0)) step = value != 0 ? std::pow(10.0, std::floor(std::log10(std::abs(value)))) : 1.0;
  if (std::abs(value) < step * 1e-9) return "0";
  if (exponent) {
    int e = static_cast<int>(std::floor(std::log10(std::abs(value))));
    const int digits = std::max(0, e - static_cast<int>(std::floor(std::log10(step) + 1e-9)));
    std::string m = fmt::format("{:.{}f}", value / std::pow(10.0, e), digits);
    if (m == "10" || m.rfind("10.", 0) == 0 || m == "-10" || m.rfind("-10.", 0) == 0) {  // 9.99.. rounded up
      ++e;
      m = fmt::format("{:.{}f}", value / std::pow(10.0, e), std::max(0, digits - 1));
    }
    return trim_zeros(m) + "e" + std::to_string(e);
  }
  std::string s = trim_zeros(fmt::format("{:.{}f}", value, decimals_for(step)));
  if (s == "-0") s = "0";
  return grouped(s);
}

// Points of the curves that can be drawn on these axes.
bool usable(double x, double y, const ChartAxes& axes) {
  return std::isfinite(x) && std::isfinite(y) && (!axes.log_x || x > 0) && (!axes.log_y || y > 0);
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

// An axis' ticks as drawn: where, the SVG text of each label, and its width in pixels at
// font-size 11 (an estimate, generous for sans-serif digits).
struct AxisTicks {
  std::vector<double> at;  // data units
  std::vector<std::string> text;
  std::vector<double> width;
};

bool power_of_ten(double v) { return v > 0 && std::abs(std::log10(v) - std::round(std::log10(v))) < 1e-9; }

AxisTicks axis_ticks(double lo, double hi, bool log, bool integers, int target) {
  AxisTicks t;
  t.at = log ? nice_log_ticks(lo, hi, target) : nice_ticks(lo, hi, target, integers);
  const std::vector<std::string> labels = tick_labels(t.at);
  // A log axis of powers of ten past the plainly written numbers: 10 with a raised exponent.
  const bool superscript = log && !t.at.empty() && std::all_of(t.at.begin(), t.at.end(), power_of_ten) &&
                           std::any_of(labels.begin(), labels.end(), [](const std::string& s) { return s.find('e') != std::string::npos; });
  for (std::size_t i = 0; i < t.at.size(); ++i) {
    if (superscript) {
      const std::string k = fmt::format("{:.0f}", std::log10(t.at[i]));
      t.text.push_back(fmt::format(R"(10<tspan dy="-6" font-size="9">{}</tspan>)", k));
      t.width.push_back(15 + 5.5 * double(k.size()));
    } else {
      double w = 0;
      for (char c : labels[i]) w += (c == ',' || c == '.') ? 3.6 : 7.0;
      t.text.push_back(escaped(labels[i]));
      t.width.push_back(w);
    }
  }
  return t;
}

}  // namespace

std::pair<double, double> axis_range(double lo, double hi, bool log, bool integers) {
  if (lo > hi) std::swap(lo, hi);
  if (log) {
    if (!(lo > 0) || hi > lo * (1 + 1e-12)) return {lo, hi};
    const double v = std::sqrt(lo * hi);
    return {v / 1.5, v * 1.5};
  }
  if (hi - lo > 1e-12 * std::max(std::abs(lo), std::abs(hi))) return {lo, hi};
  const double v = lo / 2 + hi / 2;
  double d = v == 0 ? 1.0 : 0.5 * std::pow(10.0, std::floor(std::log10(std::abs(v))));
  if (integers) d = std::max(d, 1.0);
  return {v - d, v + d};
}

std::vector<double> nice_ticks(double lo, double hi, int target, bool integers) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  std::tie(lo, hi) = axis_range(lo, hi, false, integers);
  target = std::max(target, 2);
  const int k0 = static_cast<int>(std::floor(std::log10((hi - lo) / target)));
  int k_first = k0 - 1, k_last = k0 + 1;
  if (integers) k_first = std::max(k_first, 0), k_last = std::max(k_last, k_first + 1);
  const int fewest = std::max(2, target - 1), most = target + 2;  // 4 .. 7 for the default 5
  struct Choice {
    double m = 0;
    int k = 0;
    std::int64_t first = 0, count = -1;
  };
  // The steps ascend (their counts descend). Best: a count in [fewest, most] nearest target,
  // on a tie the coarser step; else the fewest ticks above `most` if they are at most
  // target + 3; else the most ticks below `fewest` (an integer axis over a short range has
  // nothing else).
  Choice in_range, above, below;
  for (int k = k_first; k <= k_last; ++k)
    for (double m : {1.0, 2.0, 5.0}) {
      const double step = scaled(m, k);
      const auto first = static_cast<std::int64_t>(std::ceil(lo / step - 1e-9));
      const auto last = static_cast<std::int64_t>(std::floor(hi / step + 1e-9));
      const Choice c{m, k, first, last - first + 1};
      if (c.count >= fewest && c.count <= most) {
        if (in_range.count < 0 || std::abs(c.count - target) <= std::abs(in_range.count - target)) in_range = c;
      } else if (c.count > most) {
        above = c;  // the last one above is the coarsest, with the fewest ticks
      } else if (below.count < 0) {
        below = c;  // the first one below has the most ticks
      }
    }
  const Choice best = in_range.count >= 0                                ? in_range
                      : above.count >= 0 && above.count <= target + 3 ? above
                      : below.count >= 0                              ? below
                                                                      : above;
  std::vector<double> out;
  for (std::int64_t i = 0; i < best.count; ++i) {
    const double v = scaled(double(best.first + i) * best.m, best.k);
    out.push_back(v == 0 ? 0.0 : v);  // no -0
  }
  return out;
}

std::vector<double> nice_log_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(std::min(lo, hi) > 0)) return {};
  std::tie(lo, hi) = axis_range(lo, hi, true);
  target = std::max(target, 2);
  const int e_first = static_cast<int>(std::floor(std::log10(lo))), e_last = static_cast<int>(std::floor(std::log10(hi)));
  const auto inside = [&](double v) { return v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12); };
  std::vector<double> one_two_five;
  for (int e = e_first; e <= e_last && one_two_five.size() <= std::size_t(target) + 3; ++e)
    for (double m : {1.0, 2.0, 5.0})
      if (inside(scaled(m, e))) one_two_five.push_back(scaled(m, e));
  if (one_two_five.size() >= 3 && one_two_five.size() <= std::size_t(target) + 3) return one_two_five;
  if (one_two_five.size() < 3) return nice_ticks(lo, hi, target);
  // Many decades: powers of ten, every `every`-th (1, 2, 5, 10, 20, ...) so at most target + 2.
  std::vector<int> exponents;
  for (int e = e_first; e <= e_last + 1; ++e)
    if (inside(scaled(1, e))) exponents.push_back(e);
  std::vector<double> out;
  for (int every : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}) {
    out.clear();
    for (int e : exponents)
      if (e % every == 0) out.push_back(scaled(1, e));
    if (out.size() <= std::size_t(target) + 2) break;
  }
  return out;
}

std::string tick_label(double value, double step) { return format_tick(value, step, needs_exponent(value)); }

std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  std::vector<double> steps(ticks.size());
  bool even = ticks.size() >= 2;
  for (std::size_t i = 1; even && i < ticks.size(); ++i)
    even = std::abs((ticks[i] - ticks[i - 1]) - (ticks[1] - ticks[0])) <= 1e-3 * std::abs(ticks[1] - ticks[0]);
  for (std::size_t i = 0; i < ticks.size(); ++i)
    steps[i] = even ? std::abs(ticks[1] - ticks[0])
                    : (ticks[i] != 0 ? std::pow(10.0, std::floor(std::log10(std::abs(ticks[i])) + 1e-9)) : 1.0);
  bool exponent = false;
  for (double v : ticks) exponent = exponent || needs_exponent(v);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ticks.size(); ++i) out.push_back(format_tick(ticks[i], steps[i], exponent));
  return out;
}

const char* chart_color(std::size_t k) { return kColors[k % 8]; }

std::string svg_open(double width, double height) {
  return fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif">)"
                     "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
                     width, height);
}

bool has_points(const std::vector<Curve>& curves, const ChartAxes& axes) {
  for (const Curve& c : curves)
    for (const auto& [x, y] : c)
      if (usable(x, y, axes)) return true;
  return false;
}

void chart_panel(std::string& svg, double x0, double y0, double w, double h, const std::string& title,
                 const std::vector<Curve>& curves, const ChartAxes& axes) {
  auto tx = [&](double x) { return axes.log_x ? std::log10(x) : x; };
  auto ty = [&](double y) { return axes.log_y ? std::log10(y) : y; };
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const Curve& c : curves)
    for (const auto& [x, y] : c) {
      if (!usable(x, y, axes)) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  svg += fmt::format(R"(<g class="panel"><text class="panel-title" x="{}" y="{}" font-size="15" font-weight="bold">{}</text>)"
                     "\n",
                     x0, y0 - 10, escaped(title));
  if (!std::isfinite(xmin)) {
    svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>)"
                       "\n"
                       R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">no data</text>)"
                       "\n",
                       x0, y0, w, h, x0 + w / 2, y0 + h / 2);
    svg += "</g>\n";
    return;
  }
  // The shown ranges, in axis coordinates (log10 on a log axis): x as the data, y with 5 %
  // to spare at either end; a single value widened around it (axis_range).
  auto [xlo, xhi] = axis_range(xmin, xmax, axes.log_x, axes.integer_x);
  auto [ylo, yhi] = axis_range(ymin, ymax, axes.log_y, false);
  const bool y_widened = ylo != ymin || yhi != ymax;
  double ax = tx(xlo), bx = tx(xhi), ay = ty(ylo), by = ty(yhi);
  if (!y_widened) {
    const double pad = 0.05 * (by - ay);
    ay -= pad, by += pad;
  }
  auto px = [&](double x) { return x0 + (tx(x) - ax) / (bx - ax) * w; };
  auto py = [&](double y) { return y0 + h - (ty(y) - ay) / (by - ay) * h; };
  auto from_y = [&](double a) { return axes.log_y ? std::pow(10.0, a) : a; };
  auto from_x = [&](double a) { return axes.log_x ? std::pow(10.0, a) : a; };

  // Ticks: about five, fewer where the labels would touch (x: side by side; y: 16 px apart).
  AxisTicks yt, xt;
  for (int target = 5; target >= 2; --target) {
    yt = axis_ticks(from_y(ay), from_y(by), axes.log_y, false, target);
    bool apart = true;
    for (std::size_t i = 1; i < yt.at.size(); ++i) apart = apart && std::abs(py(yt.at[i]) - py(yt.at[i - 1])) >= 16;
    if (apart) break;
  }
  for (int target = 5; target >= 2; --target) {
    xt = axis_ticks(from_x(ax), from_x(bx), axes.log_x, axes.integer_x, target);
    bool apart = true;
    for (std::size_t i = 1; i < xt.at.size(); ++i)
      apart = apart && px(xt.at[i]) - px(xt.at[i - 1]) >= (xt.width[i] + xt.width[i - 1]) / 2 + 10;
    if (apart) break;
  }
  double widest_y = 0;
  for (std::size_t i = 0; i < yt.at.size(); ++i) {
    const double ypix = py(yt.at[i]);
    widest_y = std::max(widest_y, yt.width[i]);
    svg += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#ddd"/>)"
                       R"(<text class="tick-y" x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)"
                       "\n",
                       x0, ypix, x0 + w, ypix, x0 - 6, ypix + 4, yt.text[i]);
  }
  for (std::size_t i = 0; i < xt.at.size(); ++i) {
    const double xpix = px(xt.at[i]);
    svg += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#ddd"/>)"
                       R"(<text class="tick-x" x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{}</text>)"
                       "\n",
                       xpix, y0, xpix, y0 + h, xpix, y0 + h + 16, xt.text[i]);
  }
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>)"
                     "\n",
                     x0, y0, w, h);
  // Axis titles: x centred under the tick labels, y rotated left of the widest y label.
  svg += fmt::format(R"(<text class="axis-title-x" x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>)"
                     "\n",
                     x0 + w / 2, y0 + h + 34, escaped(axes.x_label));
  if (!axes.y_label.empty()) {
    const double yx = x0 - 6 - widest_y - 8;
    svg += fmt::format(R"svg(<text class="axis-title-y" x="{:.1f}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1f} {})">{}</text>)svg"
                       "\n",
                       yx, y0 + h / 2, yx, y0 + h / 2, escaped(axes.y_label));
  }
  for (std::size_t k = 0; k < curves.size(); ++k) {
    std::string pts;
    std::size_t n = 0;
    for (const auto& [x, y] : curves[k])
      if (usable(x, y, axes)) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y)), ++n;
    if (n >= 2)
      svg += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"/>)"
                         "\n",
                         chart_color(k), pts);
    if (n <= 60) {  // dots where the points are few; a single point is only a dot
      for (const auto& [x, y] : curves[k])
        if (usable(x, y, axes))
          svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}"/>)", px(x), py(y), n == 1 ? 4.5 : 3.0,
                             chart_color(k));
      if (n > 0) svg += "\n";
    }
  }
  svg += "</g>\n";
}

void chart_legend_entry(std::string& svg, double x, double y, std::size_t k, const std::string& label) {
  svg += fmt::format(R"(<rect x="{}" y="{}" width="18" height="4" fill="{}"/><text x="{}" y="{}" font-size="13">{}</text>)"
                     "\n",
                     x, y - 5, chart_color(k), x + 24, y, escaped(label));
}

double legend_text_width(const std::string& label) {
  std::size_t chars = 0;
  for (unsigned char c : label) chars += (c & 0xC0) != 0x80;  // UTF-8 code points
  return 24 + 7.5 * double(chars);
}

}  // namespace wedge::tools
