// `wedge params`, `wedge audit-causal`, `wedge ops` and `wedge depsim` end to end, through the built binary.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shell.h"

namespace {

using Run = wedge::testing::ShellRun;

// Runs the wedge binary with `args`.
Run wedge_cli(const std::string& args) { return wedge::testing::shell(std::string("\"") + WEDGE_CLI + "\" " + args); }

bool have_cli() {
  if (std::filesystem::exists(WEDGE_CLI)) return true;
  MESSAGE("skipped: the wedge binary is not built (" << WEDGE_CLI << ")");
  return false;
}

std::int64_t params_total(const std::string& flags) {
  const Run r = wedge_cli("params --json " + flags);
  REQUIRE_MESSAGE(r.exit_code() == 0, r.text());
  // the JSON object is the last line
  const auto j = r.last_json();
  std::int64_t sum = 0;
  for (const auto& [part, n] : j.at("parts").items()) sum += n.get<std::int64_t>();
  CHECK(sum == j.at("total").get<std::int64_t>());
  return j.at("total").get<std::int64_t>();
}

}  // namespace

TEST_CASE("wedge params: the paper's four configurations from flags") {
  if (!have_cli()) return;
  CHECK(params_total("--model transformer") == 12'584'960);
  CHECK(params_total("--model grassmann") == 13'001'408);
  CHECK(params_total("--model transformer --layers 12 --block 256") == 17'356'288);
  CHECK(params_total("--model grassmann --layers 12 --block 256 "
                     "--window-schedule 1,1,2,2,4,4,8,8,12,12,16,16") == 18'189'184);
  CHECK(params_total("--model grassmann --no-mix-out-proj") == 12'606'656);

  // --vocab FILE: the vocabulary size is the file's number of lines.
  const auto vocab = std::filesystem::temp_directory_path() / "wedge_test_models_vocab.txt";
  {
    std::ofstream f(vocab);
    for (int i = 0; i < 100; ++i) f << "tok" << i << "\n";
  }
  CHECK(params_total("--model transformer --layers 1 --d-model 8 --d-ff 16 --heads 2 --block 4 --vocab " +
                     vocab.string()) ==
        100 * 8 + 4 * 8 + (8 * 24 + 24) + (8 * 8 + 8) + 32 + (8 * 16 + 16) + (16 * 8 + 8));
  std::filesystem::remove(vocab);

  const Run table = wedge_cli("params --model grassmann");
  CHECK(table.exit_code() == 0);
  CHECK(table.out.find("mixing.plucker") != std::string::npos);
  CHECK(table.out.find("13,001,408") != std::string::npos);

  const Run bad = wedge_cli("params --heads 3");
  CHECK(bad.exit_code() != 0);
  CHECK(bad.err.find("--heads 3 does not divide --d-model 256") != std::string::npos);
}

TEST_CASE("wedge audit-causal: passes the real models, fails the leaky one") {
  if (!have_cli()) return;
  const std::string small = "--layers 2 --d-model 16 --d-ff 32 --heads 2 --block 20 --vocab-size 50 --rank 4";
  const Run t = wedge_cli("audit-causal --model transformer " + small);
  CHECK_MESSAGE(t.exit_code() == 0, t.text());
  const Run g = wedge_cli("audit-causal --model grassmann " + small);
  CHECK_MESSAGE(g.exit_code() == 0, g.text());
  const Run leak = wedge_cli("audit-causal --model grassmann --leaky --probe 0,5 " + small);
  CHECK(leak.exit_code() == 1);
  CHECK(leak.out.find("NOT causal") != std::string::npos);
  CHECK(leak.out.find("t=0") != std::string::npos);
  const std::string sheaf = "--model sheaf " + small + " --patch 3 --section-dim 6 --state-size 4 --expert-d-ff 8";
  const Run s = wedge_cli("audit-causal " + sheaf);
  CHECK_MESSAGE(s.exit_code() == 0, s.text());
  const Run sleak = wedge_cli("audit-causal --leaky " + sheaf);
  CHECK(sleak.exit_code() == 1);
  CHECK(sleak.out.find("NOT causal") != std::string::npos);
}

TEST_CASE("wedge params --model sheaf --json: the total and its parts") {
  if (!have_cli()) return;
  CHECK(params_total("--model sheaf") == 13'260'976);
  const Run r = wedge_cli("params --model sheaf --json");
  REQUIRE(r.exit_code() == 0);
  const auto j = r.last_json();
  std::int64_t sum = 0;
  for (const auto& [part, count] : j.at("parts").items()) sum += count.get<std::int64_t>();
  CHECK(sum == j.at("total").get<std::int64_t>());
  CHECK(j.at("parts").contains("mixer.in"));
  CHECK(j.at("config").at("patch") == 16);
}

TEST_CASE("wedge params counts without building: a model far too large to build answers at once") {
  if (!have_cli()) return;
  // 1.1 * 10^12 parameters (4.4 TB of weights): counted from the configuration alone.
  CHECK(params_total("--d-model 65536 --layers 64") == 1'110'148'055'040);
  const Run table = wedge_cli("params --d-model 65536 --layers 64");
  CHECK(table.exit_code() == 0);
  CHECK(table.out.find("1,110,148,055,040") != std::string::npos);

  const Run rank = wedge_cli("params --model grassmann --rank 300");
  CHECK(rank.exit_code() == 1);
  CHECK(rank.err.find("error: --rank 300 must be at most --d-model 256") != std::string::npos);
  const Run wide = wedge_cli("params --d-model 2000000");
  CHECK(wide.exit_code() == 1);
  CHECK(wide.err.find("error: --d-model 2000000 must be at most 1048576") != std::string::npos);
  const Run overflow =
      wedge_cli("params --model sheaf --layers 4096 --types 4096 --section-dim 1048576 --cover-depth 6 --json");
  CHECK(overflow.exit_code() == 1);
  CHECK(overflow.err.find("error: the parameter count does not fit in 64 bits") != std::string::npos);
  const Run nli = wedge_cli("params --task nli --layers 5000");
  CHECK(nli.exit_code() == 1);
  CHECK(nli.err.find("error: --layers must be at most 4096, got 5000") != std::string::npos);
}

TEST_CASE("wedge audit-causal refuses a model this machine cannot hold before building it") {
  if (!have_cli()) return;
  if (!std::filesystem::exists("/proc/meminfo")) {
    MESSAGE("skipped: no /proc/meminfo to compare with");
    return;
  }
  // 1.8 * 10^16 parameters: no machine holds their weights (72 PB).
  const Run r = wedge_cli("audit-causal --d-model 1048576 --layers 4096");
  CHECK(r.exit_code() == 1);
  CHECK_MESSAGE(r.err.find("error: the model has 18,023,265,400,258,560 parameters and needs ~") == 0, r.text());
  CHECK(r.err.find("for its weights; this machine has") != std::string::npos);
}

TEST_CASE("wedge ops lists every op with the CPU, and CUDA whenever it is built in") {
  if (!have_cli()) return;
  const Run r = wedge_cli("ops");
  REQUIRE_MESSAGE(r.exit_code() == 0, r.text());
  const bool cuda_built = r.out.find("CUDA: built in") != std::string::npos;
  int rows = 0;
  std::size_t pos = r.out.find('\n') + 1;  // past the header
  while (pos < r.out.size() && r.out[pos] != '\n') {
    const std::size_t end = r.out.find('\n', pos);
    const std::string line = r.out.substr(pos, end - pos);
    INFO(line);
    char name[64] = {}, devices[64] = {};
    REQUIRE(std::sscanf(line.c_str(), "%63s %63s", name, devices) == 2);
    CHECK(std::string(devices) == (cuda_built ? "cpu,cuda" : "cpu"));
    ++rows;
    pos = end + 1;
  }
  CHECK(rows >= 39);
}

TEST_CASE("wedge depsim: the paper's n, JSON fields, the scaling plot and one-line flag errors") {
  if (!have_cli()) return;
  Run r = wedge_cli("depsim --json");
  REQUIRE_MESSAGE(r.exit_code() == 0, r.text());
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("n") == 32768);
  const std::int64_t true_edges = j.at("true_edges").at("total");
  CHECK(true_edges == j.at("true_edges").at("local").get<std::int64_t>() + j.at("true_edges").at("anchor").get<std::int64_t>() +
                          j.at("true_edges").at("entity").get<std::int64_t>());
  CHECK(true_edges > 66'000);
  CHECK(true_edges < 68'000);
  std::map<std::string, nlohmann::json> sets;
  for (const auto& s : j.at("edge_sets")) sets[s.at("name")] = s;
  CHECK(sets.size() == 6);
  CHECK(sets.at("dense").at("edges") == 536'854'528);  // n^2 / 2: the paper's ≈ 536 M
  CHECK(sets.at("dense").at("coverage") == 1.0);
  CHECK(sets.at("window").at("edges") == 8 * 32768 - 36);
  // The default window of 8 lands near the paper's 96.5 % coverage and ≈ 75 % waste.
  CHECK(std::abs(sets.at("window").at("coverage").get<double>() - 0.965) < 0.01);
  CHECK(std::abs(sets.at("window").at("waste").get<double>() - 0.75) < 0.02);
  for (const auto& [name, s] : sets) {
    INFO(name);
    const double coverage = s.at("coverage"), waste = s.at("waste");
    CHECK(coverage >= 0);
    CHECK(coverage <= 1);
    CHECK(waste >= 0);
    CHECK(waste <= 1);
  }

  const auto svg = std::filesystem::temp_directory_path() / "wedge_test_depsim.svg";
  std::filesystem::remove(svg);
  r = wedge_cli("depsim --scaling --plot " + svg.string());
  REQUIRE_MESSAGE(r.exit_code() == 0, r.text());
  CHECK(r.out.find("1,048,576") != std::string::npos);
  CHECK(r.out.find("549,755,289,600") != std::string::npos);  // dense at n = 2^20
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("true dependency edges G*") != std::string::npos);
  CHECK(text.find("s &lt; t") != std::string::npos);  // labels escaped
  CHECK(text.find("</svg>") != std::string::npos);
  std::filesystem::remove(svg);

  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--n 1", "error: --n 1 must lie in"},
           {"--anchor-rate 1.5", "error: --anchor-rate 1.5 must be a probability in [0, 1]"},
           {"--local-extra -0.1", "error: --local-extra -0.1 must be a probability"},
           {"--window 0", "error: --window 0 must lie in"},
           {"--cover-depth 0", "error: --cover-depth 0 must lie in [1, 6]"},
           {"--window-schedule 1,2", "error: --window-schedule has 2 offsets but --layers is 6"}}) {
    r = wedge_cli("depsim " + flags);
    CHECK(r.exit_code() == 1);
    CHECK_MESSAGE(r.err.rfind(message, 0) == 0, r.text());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
  }
}
