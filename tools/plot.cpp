#include "tools/plot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "engine/atomic_file.h"
#include "tools/svg_chart.h"

namespace wedge::tools {

namespace {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> loss, ppl;  // (step, value)
  std::vector<std::pair<double, double>> accuracy;    // a classifier's selection accuracy
  // SheafStateLM's measurements at each evaluation (empty for the other models)
  std::vector<std::pair<double, double>> energy, energy_normalised, balance;
  // --data depsim runs: accuracy at the last evaluation by distance bucket (x: the bucket's
  // shortest distance), over all dependent targets and over the key-value recalls only
  std::vector<std::pair<double, double>> by_distance, recall_by_distance;
};

// (shortest distance of each bucket, accuracy) of the buckets that held probes.
std::vector<std::pair<double, double>> accuracy_curve(const nlohmann::json& accuracy) {
  std::vector<std::pair<double, double>> out;
  for (std::size_t b = 0; b < accuracy.size(); ++b)
    if (accuracy[b].is_number()) out.emplace_back(std::ldexp(1.0, static_cast<int>(b)), accuracy[b].get<double>());
  return out;
}

// A number of a metrics line; NaN (not drawn) when it is missing or not a number (a JSON null).
double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
}

Series read_run(const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("plot: no metrics in '" + dir + "' (" + path + " is missing)");
  Series s;
  s.label = std::filesystem::path(dir).filename().string();
  if (s.label.empty()) s.label = std::filesystem::path(dir).parent_path().filename().string();
  std::ifstream cfg(dir + "/config.json");
  if (cfg) {
    try {
      auto j = nlohmann::json::parse(cfg);
      if (j.value("task", std::string()) == "nli")
        s.label += " (nli, " + j.at("model").value("head", std::string("?")) +
                   (j.at("model").value("backbone_d", std::int64_t{0}) > 0 ? ", on a frozen LM" : "") +
                   (j.at("model").value("hypothesis_only", false) ? ", hypothesis only)" : ")");
      else
        s.label += " (" + j.at("model").value("model", std::string("?")) + ")";
    } catch (const std::exception&) {
    }
  }
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      throw std::runtime_error(fmt::format("plot: {}:{} is not valid JSON", path, lineno));
    }
    const double step = number(j, "step");
    const std::string eval = j.contains("eval") && j["eval"].is_string() ? j["eval"].get<std::string>() : "";
    if (eval == "select") {
      // a classifier evaluates at the end of each epoch: its accuracy is drawn by epoch
      s.accuracy.emplace_back(j.contains("epoch") ? number(j, "epoch") : step, number(j, "accuracy"));
    } else if (!eval.empty() && j.contains("ppl")) {
      s.ppl.emplace_back(step, number(j, "ppl"));
      if (j.contains("gluing_energy")) s.energy.emplace_back(step, number(j, "gluing_energy"));
      if (j.contains("gluing_energy_normalised")) s.energy_normalised.emplace_back(step, number(j, "gluing_energy_normalised"));
      if (j.contains("balance_loss")) s.balance.emplace_back(step, number(j, "balance_loss"));
      if (j.contains("dependencies") && j["dependencies"].is_object()) {
        const nlohmann::json& d = j["dependencies"];
        s.by_distance = accuracy_curve(d.value("accuracy", nlohmann::json::array()));
        if (d.contains("types") && d["types"].contains("entity"))
          s.recall_by_distance = accuracy_curve(d["types"]["entity"].value("by_distance", nlohmann::json::array()));
      }
    } else if (eval.empty() && j.contains("loss")) {
      s.loss.emplace_back(step, number(j, "loss"));
    }
  }
  // A resumed run may repeat steps; keep the last value of each step, in step order.
  for (auto* v : {&s.loss, &s.ppl, &s.accuracy, &s.energy, &s.energy_normalised, &s.balance}) {
    std::stable_sort(v->begin(), v->end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<std::pair<double, double>> uniq;
    for (auto& p : *v) {
      if (!uniq.empty() && uniq.back().first == p.first) uniq.back() = p;
      else uniq.push_back(p);
    }
    *v = std::move(uniq);
  }
  return s;
}

// Smooths a noisy per-step loss with a centred moving average (window ~1 % of the run).
std::vector<std::pair<double, double>> smooth(const std::vector<std::pair<double, double>>& v) {
  const std::size_t w = std::max<std::size_t>(1, v.size() / 100);
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < v.size(); i += std::max<std::size_t>(1, w / 2)) {
    double sum = 0;
    std::size_t n = 0;
    for (std::size_t j = (i >= w ? i - w : 0); j < std::min(v.size(), i + w + 1); ++j, ++n) sum += v[j].second;
    out.emplace_back(v[i].first, sum / static_cast<double>(n));
  }
  return out;
}

}  // namespace

void write_curves_svg(const std::vector<std::string>& runs, const std::string& out_path) {
  if (runs.empty()) throw std::runtime_error("plot: give at least one run directory");
  std::vector<Series> series;
  for (const auto& r : runs) series.push_back(read_run(r));
  // Language models show validation perplexity, classifiers their selection accuracy.
  bool classifiers = false, language_models = false;
  for (const auto& s : series) {
    classifiers = classifiers || !s.accuracy.empty();
    language_models = language_models || !s.ppl.empty();
  }
  if (classifiers && language_models)
    throw std::runtime_error("plot: language-model and classifier runs measure different things; plot them apart");
  // Every panel there could be, in reading order; only those where some run has a point are
  // drawn, two to a row, so a missing one leaves no hole.
  struct Panel {
    std::string title;
    std::vector<Curve> curves;
    ChartAxes axes;
  };
  auto panel = [&](std::string title, auto field, std::string x_label, std::string y_label) {
    Panel p{std::move(title), {}, {}};
    for (const Series& s : series) p.curves.push_back(field(s));
    p.axes.x_label = std::move(x_label);
    p.axes.y_label = std::move(y_label);
    p.axes.integer_x = true;
    return p;
  };
  std::vector<Panel> panels;
  panels.push_back(panel("training loss (smoothed)", [](const Series& s) { return smooth(s.loss); }, "step", "training loss"));
  if (classifiers) {
    panels.push_back(panel("selection accuracy", [](const Series& s) { return s.accuracy; }, "epoch", "selection accuracy"));
  } else {
    panels.push_back(panel("validation perplexity (log scale)", [](const Series& s) { return s.ppl; }, "step", "validation perplexity"));
    panels.back().axes.log_y = true;
  }
  panels.push_back(panel("gluing energy (raw, validation)", [](const Series& s) { return s.energy; }, "step", "gluing energy (raw)"));
  panels.push_back(panel("gluing energy (normalised, validation)", [](const Series& s) { return s.energy_normalised; }, "step",
                         "gluing energy (normalised)"));
  for (const bool recalls : {false, true}) {
    Panel p = panel(recalls ? "key-value recalls, last evaluation" : "dependent targets, last evaluation",
                    [&](const Series& s) { return recalls ? s.recall_by_distance : s.by_distance; },
                    "distance in tokens (bucket 2^k .. 2^(k+1) - 1)", recalls ? "recall accuracy" : "accuracy");
    p.axes.log_x = true;
    p.axes.integer_x = false;
    panels.push_back(std::move(p));
  }
  std::erase_if(panels, [](const Panel& p) { return !has_points(p.curves, p.axes); });
  if (panels.empty())
    throw std::runtime_error("plot: nothing to draw yet: the runs' metrics.jsonl hold no training loss or evaluation");

  // Panels 370 x 300 at x 85 and 605 (room for the y labels and title on the left), rows 390
  // apart (the title above, the x labels and title below); the legend under them, in two
  // columns unless a label is too long for one.
  const double W = 1000, left[2] = {85, 605}, panel_w = 370, panel_h = 300, row = 390, top = 40;
  const std::size_t rows = (panels.size() + 1) / 2;
  bool one_column = false;
  for (const Series& s : series) one_column = one_column || legend_text_width(s.label) > left[1] - left[0] - 20;
  const std::size_t columns = one_column ? 1 : 2, legend_rows = (series.size() + columns - 1) / columns;
  const double legend_top = top + double(rows) * row - 20;
  std::string svg = svg_open(W, legend_top + 24.0 * double(legend_rows) + 10);
  for (std::size_t i = 0; i < panels.size(); ++i)
    chart_panel(svg, left[i % 2], top + row * double(i / 2), panel_w, panel_h, panels[i].title, panels[i].curves, panels[i].axes);
  for (std::size_t k = 0; k < series.size(); ++k)
    chart_legend_entry(svg, left[k % columns], legend_top + 24.0 * double(k / columns), k, series[k].label);
  svg += "</svg>\n";
  write_file_atomic(out_path, svg, /*durable=*/false);
}

}  // namespace wedge::tools
