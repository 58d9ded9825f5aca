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
    const double step = j.value("step", 0.0);
    if (j.contains("eval") && j.at("eval") == "select") {
      s.accuracy.emplace_back(step, j.value("accuracy", 0.0));
    } else if (j.contains("eval") && j.contains("ppl")) {
      s.ppl.emplace_back(step, j.value("ppl", 0.0));
      if (j.contains("gluing_energy")) s.energy.emplace_back(step, j.value("gluing_energy", 0.0));
      if (j.contains("gluing_energy_normalised"))
        s.energy_normalised.emplace_back(step, j.value("gluing_energy_normalised", 0.0));
      if (j.contains("balance_loss")) s.balance.emplace_back(step, j.value("balance_loss", 0.0));
      if (j.contains("dependencies") && j["dependencies"].is_object()) {
        const nlohmann::json& d = j["dependencies"];
        s.by_distance = accuracy_curve(d.value("accuracy", nlohmann::json::array()));
        if (d.contains("types") && d["types"].contains("entity"))
          s.recall_by_distance = accuracy_curve(d["types"]["entity"].value("by_distance", nlohmann::json::array()));
      }
    } else if (j.contains("loss")) {
      s.loss.emplace_back(step, j.value("loss", 0.0));
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
  bool gluing = false;  // a row of panels when some run measured its gluing
  bool dependencies = false;  // and one when some run scored the dependency probe
  for (const auto& s : series) {
    gluing = gluing || !s.energy.empty();
    dependencies = dependencies || !s.by_distance.empty();
  }
  const double W = 1000, H = 420 + (gluing ? 380 : 0) + (dependencies ? 380 : 0);
  std::string svg = svg_open(W, H + 30.0 * static_cast<double>((series.size() + 1) / 2));
  // Language models show validation perplexity, classifiers their selection accuracy.
  bool classifiers = false, language_models = false;
  for (const auto& s : series) {
    classifiers = classifiers || !s.accuracy.empty();
    language_models = language_models || !s.ppl.empty();
  }
  if (classifiers && language_models)
    throw std::runtime_error("plot: language-model and classifier runs measure different things; plot them apart");
  std::vector<std::vector<std::pair<double, double>>> loss, right;
  for (auto& s : series) {
    loss.push_back(smooth(s.loss));
    right.push_back(classifiers ? s.accuracy : s.ppl);
  }
  ChartAxes linear, log_y;
  log_y.log_y = true;
  chart_panel(svg, 70, 40, 380, 300, "training loss (smoothed)", loss, linear);
  if (classifiers) chart_panel(svg, 580, 40, 380, 300, "selection accuracy", right, linear);
  else chart_panel(svg, 580, 40, 380, 300, "validation perplexity (log scale)", right, log_y);
  if (gluing) {
    std::vector<std::vector<std::pair<double, double>>> energy, normalised;
    for (auto& s : series) {
      energy.push_back(s.energy);
      normalised.push_back(s.energy_normalised);
    }
    chart_panel(svg, 70, 420, 380, 300, "gluing energy (raw, validation)", energy, linear);
    chart_panel(svg, 580, 420, 380, 300, "gluing energy (normalised, validation)", normalised, linear);
  }
  if (dependencies) {
    std::vector<std::vector<std::pair<double, double>>> all, recall;
    for (auto& s : series) {
      all.push_back(s.by_distance);
      recall.push_back(s.recall_by_distance);
    }
    ChartAxes distance;
    distance.x_label = "distance (bucket 2^k .. 2^(k+1) - 1)";
    distance.y_label = "accuracy";
    distance.log_x = true;
    const double y = gluing ? 800 : 420;
    chart_panel(svg, 70, y, 380, 300, "dependent targets, last evaluation", all, distance);
    chart_panel(svg, 580, y, 380, 300, "key-value recalls, last evaluation", recall, distance);
  }
  for (std::size_t k = 0; k < series.size(); ++k) {
    const double lx = 70 + 480.0 * static_cast<double>(k % 2), ly = H - 20 + 24.0 * static_cast<double>(k / 2);
    chart_legend_entry(svg, lx, ly, k, series[k].label);
  }
  svg += "</svg>\n";
  write_file_atomic(out_path, svg, /*durable=*/false);
}

}  // namespace wedge::tools
