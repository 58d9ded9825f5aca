// The charts of `wedge plot` and `wedge depsim --plot`: round-number ticks (hand-computed
// cases of the 1-2-5 rules), plain labels, degenerate ranges, and through write_curves_svg
// the panels a set of runs gets, their axis titles, and tick labels that never repeat.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tools/plot.h"
#include "tools/svg_chart.h"
#include "trainer_support.h"

using namespace wedge::tools;
namespace fs = std::filesystem;

namespace {

using Ticks = std::vector<double>;
using Labels = std::vector<std::string>;

// The SVG is well formed as far as a chart needs: every tag closed in order, every '&' an
// entity, no '<' or '>' loose in text.
void check_well_formed(const std::string& svg) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while (i < svg.size()) {
    if (svg[i] == '&') {
      const std::size_t semi = svg.find(';', i);
      REQUIRE(semi != std::string::npos);
      const std::string entity = svg.substr(i, semi - i + 1);
      CHECK_MESSAGE((entity == "&lt;" || entity == "&gt;" || entity == "&amp;" || entity == "&quot;"), entity);
      i = semi + 1;
      continue;
    }
    if (svg[i] == '>') FAIL("a '>' outside a tag at " << i);
    if (svg[i] != '<') {
      ++i;
      continue;
    }
    const std::size_t end = svg.find('>', i);
    REQUIRE(end != std::string::npos);
    const std::string tag = svg.substr(i + 1, end - i - 1);
    REQUIRE(tag.find('<') == std::string::npos);
    const std::string name = tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" />", 1) - (tag[0] == '/' ? 1 : 0));
    if (tag[0] == '/') {
      REQUIRE_MESSAGE(!open.empty(), "closing " << name << " with nothing open");
      CHECK(open.back() == name);
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(name);
    }
    i = end + 1;
  }
  CHECK(open.empty());
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The text of every <text class="cls" ...>...</text> in `svg`, in order.
Labels texts(const std::string& svg, const std::string& cls) {
  Labels out;
  const std::regex re("<text class=\"" + cls + "\"[^>]*>(.*?)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) out.push_back((*it)[1]);
  return out;
}

// Each panel's SVG (<g class="panel"> ... </g>).
std::vector<std::string> panels(const std::string& svg) {
  std::vector<std::string> out;
  for (std::size_t at = svg.find("<g class=\"panel\">"); at != std::string::npos; at = svg.find("<g class=\"panel\">", at + 1))
    out.push_back(svg.substr(at, svg.find("</g>", at) - at));
  return out;
}

bool distinct(const Labels& labels) { return std::set<std::string>(labels.begin(), labels.end()).size() == labels.size(); }

// A run folder with a metrics.jsonl (and config.json) written by hand.
struct HandRun {
  std::string dir;
  HandRun(const std::string& name, const std::string& model, const std::string& metrics, bool nli = false)
      : dir(wedge::testing::fresh_run_dir(name)) {
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json") << (nli ? R"({"task": "nli", "model": {"head": ")" + model + R"("}})"
                                                : R"({"model": {"model": ")" + model + R"("}})");
    std::ofstream(dir + "/metrics.jsonl") << metrics;
  }
  ~HandRun() { fs::remove_all(dir); }
};

// Loss lines for steps first..last, falling from 4.
std::string loss_lines(int first, int last) {
  std::string out;
  for (int s = first; s <= last; ++s) out += R"({"step": )" + std::to_string(s) + R"(, "epoch": 0, "loss": )" + std::to_string(4.0 - 0.01 * s) + "}\n";
  return out;
}

std::string eval_line(int step, double ppl, const std::string& extra = "") {
  return R"({"eval": "valid", "step": )" + std::to_string(step) + R"(, "epoch": 0, "ppl": )" + std::to_string(ppl) + extra + "}\n";
}

}  // namespace

TEST_CASE("svg chart: linear ticks are 1-2-5 multiples, about five of them") {
  CHECK(nice_ticks(0.37, 6.2) == Ticks{1, 2, 3, 4, 5, 6});
  CHECK(nice_ticks(1.99, 3.86) == Ticks{2, 2.5, 3, 3.5});                          // step 0.5
  CHECK(nice_ticks(0, 1430) == Ticks{0, 200, 400, 600, 800, 1000, 1200, 1400});  // 8 beats 3 (0, 500, 1000)
  CHECK(nice_ticks(0.1, 19.9) == Ticks{5, 10, 15});  // but 3 beats 9 (2, 4, ..., 18)
  CHECK(nice_ticks(1, 60) == Ticks{10, 20, 30, 40, 50, 60});
  CHECK(nice_ticks(6.2, 0.37) == Ticks{1, 2, 3, 4, 5, 6});  // either order
  // negative ranges, and ranges across zero
  CHECK(nice_ticks(-7.3, -0.2) == Ticks{-7, -6, -5, -4, -3, -2, -1});
  CHECK(nice_ticks(-2.4, 3.1) == Ticks{-2, -1, 0, 1, 2, 3});
  CHECK(nice_ticks(-1430, 0) == Ticks{-1400, -1200, -1000, -800, -600, -400, -200, 0});
  CHECK(!std::signbit(nice_ticks(-1, 1)[2]));  // 0, not -0
  // tiny ranges: the step 0.0002, values equal to the literals
  CHECK(nice_ticks(0.3331, 0.3342) == Ticks{0.3332, 0.3334, 0.3336, 0.3338, 0.334, 0.3342});
  CHECK(nice_ticks(1e-9, 7e-9) == Ticks{1e-9, 2e-9, 3e-9, 4e-9, 5e-9, 6e-9, 7e-9});
  // fewer on request (a crowded axis), and whole numbers only for steps and epochs
  CHECK(nice_ticks(0.37, 6.2, 3) == Ticks{2, 4, 6});
  CHECK(nice_ticks(1, 3, 5, /*integers=*/true) == Ticks{1, 2, 3});
  CHECK(nice_ticks(1, 3) == Ticks{1, 1.5, 2, 2.5, 3});
  CHECK(nice_ticks(0, NAN).empty());
}

TEST_CASE("svg chart: a single value gets a padded range with distinct ticks around it") {
  CHECK(axis_range(30, 30) == std::pair<double, double>{25, 35});
  CHECK(axis_range(0.5, 0.5).first == doctest::Approx(0.45));
  CHECK(axis_range(0.5, 0.5).second == doctest::Approx(0.55));
  CHECK(axis_range(0, 0) == std::pair<double, double>{-1, 1});
  CHECK(axis_range(1, 1, false, /*integers=*/true) == std::pair<double, double>{0, 2});
  CHECK(axis_range(2, 7) == std::pair<double, double>{2, 7});  // a real range stays
  CHECK(axis_range(10, 10, /*log=*/true) == std::pair<double, double>{10 / 1.5, 15});
  CHECK(nice_ticks(30, 30) == Ticks{26, 28, 30, 32, 34});
  CHECK(nice_ticks(30, 30, 5, true) == Ticks{26, 28, 30, 32, 34});
  CHECK(nice_ticks(0, 0) == Ticks{-1, -0.5, 0, 0.5, 1});
  CHECK(nice_ticks(1, 1, 5, true) == Ticks{0, 1, 2});
  CHECK(nice_ticks(-4.2, -4.2) == Ticks{-4.6, -4.4, -4.2, -4, -3.8});  // [-4.7, -3.7]
  CHECK(nice_ticks(0.5, 0.5) == Ticks{0.46, 0.48, 0.5, 0.52, 0.54});
  CHECK(nice_log_ticks(30, 30) == Ticks{20, 25, 30, 35, 40, 45});  // [20, 45]
  for (double v : {30.0, 0.0, -4.2, 1e-7, 123456.0, 0.3331}) {
    INFO(v);
    const Labels labels = tick_labels(nice_ticks(v, v));
    CHECK(labels.size() >= 3);
    CHECK(distinct(labels));
  }
}

TEST_CASE("svg chart: log ticks at 1, 2, 5 x 10^k, powers of ten over many decades") {
  CHECK(nice_log_ticks(3, 700) == Ticks{5, 10, 20, 50, 100, 200, 500});
  CHECK(nice_log_ticks(0.03, 40) == Ticks{0.1, 1, 10});         // 9 of 1-2-5: powers of ten
  CHECK(nice_log_ticks(1024, 1048576) == Ticks{1e4, 1e5, 1e6});  // depsim's n
  CHECK(nice_log_ticks(100, 1e12) == Ticks{1e2, 1e4, 1e6, 1e8, 1e10, 1e12});  // every 2nd power
  const Ticks wide = nice_log_ticks(1e-30, 1e30);  // every 10th power
  REQUIRE(wide.size() == 7);
  for (std::size_t i = 0; i < wide.size(); ++i) CHECK(std::log10(wide[i]) == doctest::Approx(-30.0 + 10.0 * double(i)));
  // under a decade, 1-2-5 x 10^k leaves fewer than 3: evenly spaced 1-2-5 steps instead
  CHECK(nice_log_ticks(403, 1430) == Ticks{600, 800, 1000, 1200, 1400});
  CHECK(nice_log_ticks(7.52, 25.6) == Ticks{10, 15, 20, 25});
  CHECK(nice_log_ticks(0.9, 1.1) == Ticks{0.9, 0.95, 1, 1.05, 1.1});
  CHECK(nice_log_ticks(0, 10).empty());
  CHECK(nice_log_ticks(-5, 10).empty());
}

TEST_CASE("svg chart: tick labels are plain, without needless digits") {
  CHECK(tick_label(1.0, 0.2) == "1");
  CHECK(tick_label(0.2, 0.1) == "0.2");
  CHECK(tick_label(0.35, 0.05) == "0.35");
  CHECK(tick_label(2.5, 0.5) == "2.5");
  CHECK(tick_label(1000, 200) == "1,000");
  CHECK(tick_label(-12500, 500) == "-12,500");
  CHECK(tick_label(1234567, 1) == "1,234,567");
  CHECK(tick_label(500, 100) == "500");
  CHECK(tick_label(-0.0, 1) == "0");
  CHECK(tick_label(5e-17, 0.1) == "0");  // a rounding remainder is 0
  CHECK(tick_label(0.3342, 0.0002) == "0.3342");
  CHECK(tick_label(0.0001, 0.0001) == "0.0001");
  CHECK(tick_label(2e7, 1e7) == "2e7");
  CHECK(tick_label(1.5e-5, 5e-6) == "1.5e-5");
  // an axis' labels alike: a common step, or each tick's own leading digit on a log axis
  CHECK(tick_labels({0.3332, 0.3334, 0.3336, 0.3338, 0.334, 0.3342}) ==
        Labels{"0.3332", "0.3334", "0.3336", "0.3338", "0.334", "0.3342"});
  CHECK(tick_labels({600, 800, 1000, 1200, 1400}) == Labels{"600", "800", "1,000", "1,200", "1,400"});
  CHECK(tick_labels({0.05, 0.1, 0.2, 0.5, 1, 2}) == Labels{"0.05", "0.1", "0.2", "0.5", "1", "2"});
  CHECK(tick_labels({1e4, 1e5, 1e6}) == Labels{"10,000", "100,000", "1,000,000"});
  CHECK(tick_labels({0, 5e6, 1e7, 1.5e7}) == Labels{"0", "5e6", "1e7", "1.5e7"});  // one style per axis
  CHECK(tick_labels({1e2, 1e4, 1e6, 1e8}) == Labels{"1e2", "1e4", "1e6", "1e8"});
  CHECK(tick_labels({-1, -0.5, 0, 0.5, 1}) == Labels{"-1", "-0.5", "0", "0.5", "1"});
}

TEST_CASE("svg chart: over many ranges the ticks lie inside, 2 to 8 of them, with distinct labels") {
  for (double lo : {-1234.5, -3.3, 0.0, 0.0007, 0.37, 2.0, 29.5, 403.0, 98765.0})
    for (double span : {1e-6, 3e-4, 0.011, 0.9, 1.0, 7.3, 45.0, 999.0, 1e6})
      for (int target : {5, 4, 3}) {
        const double hi = lo + span;
        INFO(lo << " .. " << hi << " target " << target);
        const Ticks t = nice_ticks(lo, hi, target);
        CHECK(t.size() >= 2);
        CHECK(t.size() <= std::size_t(target + 3));
        const double slack = 1e-6 * span + 1e-12 * std::abs(lo);  // rounding
        CHECK(t.front() >= lo - slack);
        CHECK(t.back() <= hi + slack);
        CHECK(distinct(tick_labels(t)));
        if (lo > 0) {
          const Ticks l = nice_log_ticks(lo, hi, target);
          CHECK(l.size() >= 2);
          CHECK(l.front() >= lo * (1 - 1e-9));
          CHECK(l.back() <= hi * (1 + 1e-9));
          CHECK(distinct(tick_labels(l)));
        }
      }
}

TEST_CASE("plot svg: axis titles, only the panels with data, no repeated tick labels") {
  const std::string svg = wedge::testing::fresh_run_dir("chart.svg");
  // A transformer run with one evaluation, a grassmann run with three: no SheafStateLM
  // diagnostics, so no gluing panels.
  HandRun once("chart_once", "transformer", loss_lines(1, 30) + eval_line(30, 24.2));
  HandRun three("chart_three & co", "grassmann", loss_lines(1, 60) + eval_line(20, 15.5) + eval_line(40, 9.1) + eval_line(60, 8.0));
  write_curves_svg({once.dir, three.dir}, svg);
  std::string text = read(svg);
  check_well_formed(text);
  CHECK(text.find("gluing") == std::string::npos);
  CHECK(text.find("chart_three &amp; co (grassmann)") != std::string::npos);  // escaped
  std::vector<std::string> drawn = panels(text);
  REQUIRE(drawn.size() == 2);
  CHECK(texts(text, "axis-title-x") == Labels{"step", "step"});
  CHECK(texts(text, "axis-title-y") == Labels{"training loss", "validation perplexity"});
  for (const std::string& p : drawn) {
    CHECK(distinct(texts(p, "tick-x")));
    CHECK(distinct(texts(p, "tick-y")));
    CHECK(texts(p, "tick-x").size() >= 3);
    CHECK(texts(p, "tick-y").size() >= 3);
  }

  // The single evaluation alone: a padded range around step 30 and a marker, no line.
  write_curves_svg({once.dir}, svg);
  text = read(svg);
  check_well_formed(text);
  drawn = panels(text);
  REQUIRE(drawn.size() == 2);
  CHECK(texts(drawn[1], "tick-x") == Labels{"26", "28", "30", "32", "34"});
  CHECK(distinct(texts(drawn[1], "tick-y")));
  CHECK(drawn[1].find("<polyline") == std::string::npos);
  CHECK(drawn[1].find("<circle") != std::string::npos);

  // A run stopped before its first evaluation: the loss panel alone, no empty perplexity one.
  HandRun early("chart_early", "transformer", loss_lines(1, 10));
  write_curves_svg({early.dir}, svg);
  text = read(svg);
  check_well_formed(text);
  CHECK(panels(text).size() == 1);
  CHECK(text.find("validation perplexity") == std::string::npos);
  CHECK(text.find("no data") == std::string::npos);

  // A SheafStateLM run with its diagnostics: the gluing panels join, with their own titles.
  HandRun sheaf("chart_sheaf", "sheaf",
                loss_lines(1, 40) + eval_line(20, 12.3, R"(, "gluing_energy": 4.9, "gluing_energy_normalised": 0.059)") +
                    eval_line(40, 8.4, R"(, "gluing_energy": 3.1, "gluing_energy_normalised": 0.037)"));
  write_curves_svg({once.dir, three.dir, sheaf.dir}, svg);
  text = read(svg);
  check_well_formed(text);
  CHECK(panels(text).size() == 4);
  CHECK(texts(text, "axis-title-y") ==
        Labels{"training loss", "validation perplexity", "gluing energy (raw)", "gluing energy (normalised)"});
  // ... but a SheafStateLM run whose evaluations carry none draws no empty gluing panel.
  HandRun bare("chart_bare_sheaf", "sheaf", loss_lines(1, 40) + eval_line(20, 12.3) + eval_line(40, 8.4));
  write_curves_svg({once.dir, bare.dir}, svg);
  text = read(svg);
  CHECK(panels(text).size() == 2);
  CHECK(text.find("gluing") == std::string::npos);

  // Nothing at all to draw is an error, not an empty picture.
  HandRun empty("chart_empty", "transformer", "");
  CHECK_THROWS_WITH_AS(write_curves_svg({empty.dir}, svg), doctest::Contains("nothing to draw"), std::runtime_error);
  fs::remove(svg);
}

TEST_CASE("plot svg: a sentence-pair run's selection accuracy by whole epochs") {
  const std::string svg = wedge::testing::fresh_run_dir("chart_nli.svg");
  std::string metrics = loss_lines(47, 47) + loss_lines(94, 94) + loss_lines(141, 141);
  for (int epoch = 1; epoch <= 3; ++epoch)
    metrics += R"({"eval": "select", "epoch": )" + std::to_string(epoch) + R"(, "step": )" + std::to_string(47 * epoch) +
               R"(, "accuracy": )" + std::to_string(0.39 + 0.02 * epoch) + R"(, "loss": 1.09})" + "\n";
  metrics += R"({"eval": "test", "epoch": 3, "step": 141, "accuracy": 0.42, "loss": 1.2})" "\n";
  HandRun nli("chart_nli", "grassmann", metrics, /*nli=*/true);
  write_curves_svg({nli.dir}, svg);
  const std::string text = read(svg);
  check_well_formed(text);
  const std::vector<std::string> drawn = panels(text);
  REQUIRE(drawn.size() == 2);
  CHECK(texts(text, "axis-title-x") == Labels{"step", "epoch"});
  CHECK(texts(text, "axis-title-y") == Labels{"training loss", "selection accuracy"});
  CHECK(texts(drawn[1], "tick-x") == Labels{"1", "2", "3"});  // no epoch 1.5
  CHECK(distinct(texts(drawn[1], "tick-y")));
  CHECK(text.find("(nli, grassmann)") != std::string::npos);
  // The evaluations' losses are no training-loss points: the loss panel keeps its three.
  std::size_t dots = 0;
  for (std::size_t at = drawn[0].find("<circle"); at != std::string::npos; at = drawn[0].find("<circle", at + 1)) ++dots;
  CHECK(dots == 3);
  fs::remove(svg);
}

TEST_CASE("svg chart: a log-log panel over many decades labels its powers of ten 10^k") {
  std::string svg = svg_open(820, 480);
  Curve dense, sparse;
  for (double n = 1024; n <= 1048576; n *= 4) dense.emplace_back(n, n * (n - 1) / 2), sparse.emplace_back(n, n / 4);
  chart_panel(svg, 90, 40, 690, 360, "edges vs n (log-log)", {dense, sparse},
              ChartAxes{.x_label = "sequence length n", .y_label = "edges (s < t)", .log_x = true, .log_y = true});
  svg += "</svg>\n";
  check_well_formed(svg);
  CHECK(texts(svg, "tick-x") == Labels{"10,000", "100,000", "1,000,000"});
  const Labels y = texts(svg, "tick-y");
  REQUIRE(!y.empty());
  CHECK(y.front().rfind("10<tspan", 0) == 0);  // raised exponents
  CHECK(distinct(y));
  CHECK(texts(svg, "axis-title-y") == Labels{"edges (s &lt; t)"});
  CHECK(texts(svg, "panel-title") == Labels{"edges vs n (log-log)"});
}
