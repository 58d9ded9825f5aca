// wedge depsim — the Sheaf-State paper's dependency simulation: a synthetic true
// dependency graph G* (data/dependency_graph.h) against the edge set of each model family
// (models/edge_sets.h): how many of the true edges each set contains (coverage) and how
// many of its edges are not true ones (waste), at one n and, with --scaling / --plot, for
// n = 1,024 ... 1,048,576. Every count is closed-form; nothing of size n^2 is built.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "data/dependency_graph.h"
#include "engine/atomic_file.h"
#include "models/edge_sets.h"
#include "models/lm.h"
#include "tools/commands.h"
#include "tools/model_flags.h"
#include "tools/svg_chart.h"

namespace wedge::tools {

namespace {

struct DepsimFlags {
  data::DependencyGraphConfig graph;
  std::int64_t window = 8;
  models::LMConfig model;  // --layers --windows --window-schedule --patch --cover-depth
  bool json = false;
  bool scaling = false;
  std::string plot;
};

// The paper's table at n = 32,768 (dense, window, sheaf-state gluing).
struct PaperRow {
  const char* coverage;
  const char* waste;
  const char* edges;
};
constexpr std::int64_t kPaperN = 32768;
constexpr const char* kPaperTrueEdges = "≈ 67 k";

std::vector<std::int64_t> scaling_lengths() {
  std::vector<std::int64_t> n;
  for (std::int64_t v = 1024; v <= (std::int64_t{1} << 20); v *= 4) n.push_back(v);
  return n;
}

struct Row {
  std::string key;    // JSON name
  std::string label;  // table name
  std::unique_ptr<models::EdgeSet> set;
  std::optional<PaperRow> paper;
};

std::string percent(double share) { return fmt::format("{:.2f} %", 100.0 * share); }

// Throws std::invalid_argument naming the flag (main prints it as one line).
void validate(const DepsimFlags& f) {
  f.graph.validate();
  if (f.window < 1 || f.window > models::kMaxEdgeSetLength)
    throw std::invalid_argument(fmt::format("--window {} must lie in [1, {}]", f.window, models::kMaxEdgeSetLength));
  models::LMConfig c = f.model;
  c.model = "grassmann";
  c.validate();  // --layers, --windows, --window-schedule
  c.model = "sheaf";
  c.validate();  // --patch, --cover-depth
}

// One row of the scaling table: the edges of each set, and the true ones, within n tokens.
struct ScalingRow {
  std::int64_t n, true_edges;
  std::vector<models::EdgeMeasure> sets;
  models::PatchMeasure patches;
};

// `wedge depsim --plot`: every edge set's edges against n, log-log, with the true edges.
void write_edge_plot(const std::string& path, const std::vector<Row>& rows, const std::vector<ScalingRow>& table,
                     const models::LMConfig& mc) {
  std::vector<Curve> curves(rows.size() + 2);
  std::vector<std::string> labels;
  for (const Row& r : rows) labels.push_back(r.label);
  labels.push_back(fmt::format("SheafStateLM gluing, patch pairs (P {}, D {})", mc.patch, mc.cover_depth));
  labels.push_back("true dependency edges G*");
  for (const ScalingRow& s : table) {
    for (std::size_t k = 0; k < rows.size(); ++k) curves[k].emplace_back(double(s.n), double(s.sets[k].edges));
    curves[rows.size()].emplace_back(double(s.n), double(s.patches.pairs));
    curves[rows.size() + 1].emplace_back(double(s.n), double(s.true_edges));
  }
  const double legend_top = 470;
  std::string svg = svg_open(820, legend_top + 22.0 * double(labels.size()) + 10);
  chart_panel(svg, 90, 40, 690, 360, "Edges each model can use vs sequence length (log-log)", curves,
              ChartAxes{.x_label = "sequence length n (tokens)", .y_label = "edges (causal pairs s < t)", .log_x = true, .log_y = true});
  for (std::size_t k = 0; k < labels.size(); ++k) chart_legend_entry(svg, 90, legend_top + 22.0 * double(k), k, labels[k]);
  svg += "</svg>\n";
  write_file_atomic(path, svg, /*durable=*/false);
}

void run_depsim(const DepsimFlags& f) {
  validate(f);
  const bool scaling = f.scaling || !f.plot.empty();
  const std::vector<std::int64_t> lengths = scaling ? scaling_lengths() : std::vector<std::int64_t>{};
  const std::int64_t n = f.graph.n;
  const std::int64_t longest = std::max(n, lengths.empty() ? n : lengths.back());

  // One graph for every n: the graph of n tokens is a prefix of the longest one's.
  data::DependencyGraphConfig gc = f.graph;
  gc.n = longest;
  const data::DependencyGraph g = data::make_dependency_graph(gc);
  auto prefix = [&](std::int64_t m) {  // edges with target < m (edges are sorted by target)
    const auto end = std::lower_bound(g.target.begin(), g.target.end(), static_cast<std::int32_t>(m));
    return static_cast<std::size_t>(end - g.target.begin());
  };
  auto targets = [&](std::int64_t m) { return std::span<const std::int32_t>(g.target.data(), prefix(m)); };
  auto sources = [&](std::int64_t m) { return std::span<const std::int32_t>(g.source.data(), prefix(m)); };

  models::LMConfig mc = f.model;
  mc.model = "grassmann";
  std::vector<Row> rows;
  rows.push_back({"dense", "dense causal attention (TransformerLM)", models::dense_edges(), PaperRow{"100 %", "99.98 %", "≈ 536 M"}});
  rows.push_back({"window", fmt::format("local window {}", f.window), models::window_edges(f.window), PaperRow{"96.5 %", "≈ 75 %", "—"}});
  rows.push_back({"grassmann_layer",
                  fmt::format("GrassmannLM, one layer (offsets {})", fmt::join(mc.offsets_for_layer(0), ",")),
                  models::grassmann_layer_edges(mc, 0), std::nullopt});
  rows.push_back({"grassmann_stack", fmt::format("GrassmannLM, {} layers composed", mc.layers),
                  models::grassmann_stack_edges(mc, longest), std::nullopt});
  mc.model = "sheaf";
  rows.push_back({"sheaf_tokens", fmt::format("SheafStateLM, one layer (P {}, D {})", mc.patch, mc.cover_depth),
                  models::sheaf_token_edges(mc), PaperRow{"100 %", "32.5 %", "≈ 100 k"}});
  const models::SheafPatchCover cover(mc);

  // Counts by type within the first n tokens.
  std::int64_t by_type[data::kDependencyTypes] = {};
  for (std::size_t i = 0; i < prefix(n); ++i) ++by_type[static_cast<std::size_t>(g.type[i])];
  const std::int64_t true_edges = static_cast<std::int64_t>(prefix(n));

  std::vector<models::EdgeMeasure> measures;
  for (const Row& r : rows) measures.push_back(models::measure(*r.set, n, targets(n), sources(n)));
  const models::PatchMeasure patches = models::measure(cover, n, targets(n), sources(n));

  std::vector<ScalingRow> table;
  for (std::int64_t m : lengths) {
    ScalingRow s{m, static_cast<std::int64_t>(prefix(m)), {}, models::measure(cover, m, targets(m), sources(m))};
    for (const Row& r : rows) s.sets.push_back(models::measure(*r.set, m, targets(m), sources(m)));
    table.push_back(std::move(s));
  }

  if (!f.plot.empty()) write_edge_plot(f.plot, rows, table, mc);

  if (f.json) {
    nlohmann::ordered_json out;
    out["n"] = n;
    out["generator"] = {{"seed", f.graph.seed},
                        {"local_reach", f.graph.local_reach},
                        {"local_extra", f.graph.local_extra},
                        {"segment_mean", f.graph.segment_mean},
                        {"anchor_rate", f.graph.anchor_rate},
                        {"entity_rate", f.graph.entity_rate},
                        {"entities", f.graph.entities}};
    out["true_edges"] = {{"total", true_edges}, {"local", by_type[0]}, {"anchor", by_type[1]}, {"entity", by_type[2]}};
    out["edge_sets"] = nlohmann::ordered_json::array();
    for (std::size_t k = 0; k < rows.size(); ++k)
      out["edge_sets"].push_back({{"name", rows[k].key},
                                  {"description", rows[k].label},
                                  {"edges", measures[k].edges},
                                  {"contained", measures[k].contained},
                                  {"coverage", measures[k].coverage()},
                                  {"waste", measures[k].waste()}});
    out["edge_sets"].push_back({{"name", "sheaf_patches"},
                                {"description", "SheafStateLM gluing: cover patch pairs; coverage over true edges that cross patches, waste over pairs that carry none"},
                                {"edges", patches.pairs},
                                {"crossing_edges", patches.crossing_edges},
                                {"contained", patches.carried_edges},
                                {"used_pairs", patches.used_pairs},
                                {"coverage", patches.coverage()},
                                {"waste", patches.waste()}});
    if (scaling) {
      out["scaling"] = nlohmann::ordered_json::array();
      for (const ScalingRow& s : table) {
        nlohmann::ordered_json row = {{"n", s.n}, {"true_edges", s.true_edges}};
        for (std::size_t k = 0; k < rows.size(); ++k)
          row[rows[k].key] = {{"edges", s.sets[k].edges}, {"coverage", s.sets[k].coverage()}, {"waste", s.sets[k].waste()}};
        row["sheaf_patches"] = {{"edges", s.patches.pairs}, {"coverage", s.patches.coverage()}, {"waste", s.patches.waste()}};
        out["scaling"].push_back(row);
      }
    }
    std::cout << out.dump() << std::endl;
    return;
  }

  const bool paper = n == kPaperN;
  std::cout << fmt::format("dependency simulation: n = {} tokens, seed {}\n", with_commas(n), f.graph.seed);
  std::cout << fmt::format("generator: local t-1, plus one at distance 2..{} with p {}; segments of mean {} tokens, "
                           "anchor rate {}; entity rate {} over {} entities (Zipf 1/k)\n",
                           f.graph.local_reach, f.graph.local_extra, f.graph.segment_mean, f.graph.anchor_rate,
                           f.graph.entity_rate, f.graph.entities);
  std::cout << fmt::format("true edges G*: {} (local {}, anchor {}, entity {}){}\n\n", with_commas(true_edges),
                           with_commas(by_type[0]), with_commas(by_type[1]), with_commas(by_type[2]),
                           paper ? fmt::format("; paper {}", kPaperTrueEdges) : "");
  std::cout << fmt::format("{:<48} {:>15} {:>11} {:>9} {:>9}", "edge set", "edges", "true in it", "coverage", "waste");
  if (paper) std::cout << "   paper: coverage / waste / edges";
  std::cout << "\n";
  for (std::size_t k = 0; k < rows.size(); ++k) {
    std::cout << fmt::format("{:<48} {:>15} {:>11} {:>9} {:>9}", rows[k].label, with_commas(measures[k].edges),
                             with_commas(measures[k].contained), percent(measures[k].coverage()),
                             percent(measures[k].waste()));
    if (paper && rows[k].paper)
      std::cout << fmt::format("   {} / {} / {}{}", rows[k].paper->coverage, rows[k].paper->waste, rows[k].paper->edges,
                               rows[k].key == "sheaf_tokens" ? " (its gluing, designed on G*)" : "");
    std::cout << "\n";
  }
  std::cout << fmt::format("{:<48} {:>15} {:>11} {:>9} {:>9}   (patch pairs; coverage of the {} edges that cross "
                           "patches, waste = pairs carrying none)\n",
                           "SheafStateLM gluing, patch pairs", with_commas(patches.pairs),
                           with_commas(patches.carried_edges), percent(patches.coverage()), percent(patches.waste()),
                           with_commas(patches.crossing_edges));
  std::cout << "\nOne SheafState layer's chain over patches is sequential, so its multi-hop reach within the layer is the\n"
               "whole past; a GrassmannLM stack reaches at most the sum of its layers' largest offsets back.\n";
  if (!scaling) return;
  std::cout << "\nedges vs n (closed-form counts; true edges from the same generator):\n";
  std::cout << fmt::format("{:>10} {:>10} {:>18} {:>12} {:>12} {:>12} {:>14} {:>10}\n", "n", "true", "dense", "window",
                           "grassmann-1", "grassmann-N", "sheaf tokens", "sheaf P-P");
  for (const ScalingRow& s : table)
    std::cout << fmt::format("{:>10} {:>10} {:>18} {:>12} {:>12} {:>12} {:>14} {:>10}\n", with_commas(s.n),
                             with_commas(s.true_edges), with_commas(s.sets[0].edges), with_commas(s.sets[1].edges),
                             with_commas(s.sets[2].edges), with_commas(s.sets[3].edges), with_commas(s.sets[4].edges),
                             with_commas(s.patches.pairs));
  if (!f.plot.empty()) std::cout << "\nwrote " << f.plot << "\n";
}

}  // namespace

void register_depsim_command(CLI::App& app) {
  auto f = std::make_shared<DepsimFlags>();
  CLI::App* cmd = app.add_subcommand(
      "depsim",
      "the Sheaf-State paper's dependency simulation: coverage and waste of each model's edge set against a "
      "synthetic true dependency graph");
  cmd->footer(
      "A seeded generator draws the true dependency graph G* of n tokens: local edges (t-1, and one more at a short "
      "distance), topic anchors (a segment's first token) and entity recurrences (the previous mention). Each model "
      "is reduced to the pairs (t, s), s < t, it can carry information along: dense causal attention (TransformerLM), "
      "a local window, GrassmannLM (one layer; its stack composed), SheafStateLM (one layer's direct edges; its gluing "
      "as patch pairs). Coverage: share of true edges a set contains. Waste: share of its edges that are not true "
      "edges. The paper's generator is not published: these defaults give its ≈ 67 k true edges at n = 32,768, and "
      "the paper's numbers are printed beside wedge's at that n. Edge counts are closed-form (nothing of size n^2 is "
      "built); --scaling --plot takes well under a second.");
  data::DependencyGraphConfig& g = f->graph;
  cmd->add_option("--n", g.n, "tokens in the sequence (2 .. 2^24)")->capture_default_str();
  cmd->add_option("--seed", g.seed, "seed of the generator")->check(non_negative_integer())->capture_default_str();
  cmd->add_option("--local-reach", g.local_reach, "largest distance of the extra local edge (uniform in 2..reach)")
      ->capture_default_str();
  cmd->add_option("--local-extra", g.local_extra, "probability that a token has the extra local edge (every token has t-1)")
      ->capture_default_str();
  cmd->add_option("--segment-mean", g.segment_mean, "mean segment length (geometric); a segment's first token is its anchor")
      ->capture_default_str();
  cmd->add_option("--anchor-rate", g.anchor_rate, "probability that a token depends on its segment's anchor")
      ->capture_default_str();
  cmd->add_option("--entity-rate", g.entity_rate, "probability that a token mentions an entity (linked to its previous mention)")
      ->capture_default_str();
  cmd->add_option("--entities", g.entities, "entity pool size (Zipf weights 1/k)")->capture_default_str();
  cmd->add_option("--window", f->window,
                  "width w of the local window t-w <= s < t; the default 8 is the generator's --local-reach, which "
                  "puts its coverage near the paper's 96.5 %")
      ->capture_default_str();
  models::LMConfig& m = f->model;
  cmd->add_option("--layers", m.layers, "GrassmannLM layers composed")->capture_default_str();
  cmd->add_option("--windows", m.windows, "GrassmannLM offsets used by every layer")->delimiter(',')->capture_default_str();
  cmd->add_option("--window-schedule", m.window_schedule, "GrassmannLM: one offset per layer (overrides --windows)")
      ->delimiter(',');
  cmd->add_option("--patch", m.patch, "SheafStateLM: tokens per patch P")->capture_default_str();
  cmd->add_option("--cover-depth", m.cover_depth, "SheafStateLM: cover depth D (patches p-1, p-2, ..., p-2^(D-1))")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object: generator settings, true edges by type, and per edge set "
                                   "edges, contained true edges, coverage, waste (with --scaling, per n too)");
  cmd->add_flag("--scaling", f->scaling, "also the edges of every set and the true edges for n = 1,024, 4,096, ..., 1,048,576");
  cmd->add_option("--plot", f->plot, "write the --scaling numbers as a log-log SVG of edges vs n (implies --scaling)")
      ->type_name("FILE.svg");
  cmd->callback([f] { run_depsim(*f); });
}

}  // namespace wedge::tools
