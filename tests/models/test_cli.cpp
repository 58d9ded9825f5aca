// `wedge params` and `wedge audit-causal` end to end, through the built binary.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct Run {
  int status = -1;
  std::string out;
};

// Runs the wedge binary with `args`, capturing stdout (stderr is merged in).
Run wedge_cli(const std::string& args) {
  Run r;
  FILE* pipe = popen((std::string("\"") + WEDGE_CLI + "\" " + args + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) r.out += buffer;
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool have_cli() {
  if (std::filesystem::exists(WEDGE_CLI)) return true;
  MESSAGE("skipped: the wedge binary is not built (" << WEDGE_CLI << ")");
  return false;
}

std::int64_t params_total(const std::string& flags) {
  const Run r = wedge_cli("params --json " + flags);
  REQUIRE_MESSAGE(r.status == 0, r.out);
  // the JSON object is the last line
  const auto start = r.out.rfind('\n', r.out.size() - 2);
  const auto j = nlohmann::json::parse(r.out.substr(start == std::string::npos ? 0 : start + 1));
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
  CHECK(table.status == 0);
  CHECK(table.out.find("mixing.plucker") != std::string::npos);
  CHECK(table.out.find("13,001,408") != std::string::npos);

  const Run bad = wedge_cli("params --heads 3");
  CHECK(bad.status != 0);
  CHECK(bad.out.find("--heads 3 does not divide --d-model 256") != std::string::npos);
}

TEST_CASE("wedge audit-causal: passes the real models, fails the leaky one") {
  if (!have_cli()) return;
  const std::string small = "--layers 2 --d-model 16 --d-ff 32 --heads 2 --block 20 --vocab-size 50 --rank 4";
  const Run t = wedge_cli("audit-causal --model transformer " + small);
  CHECK_MESSAGE(t.status == 0, t.out);
  const Run g = wedge_cli("audit-causal --model grassmann " + small);
  CHECK_MESSAGE(g.status == 0, g.out);
  const Run leak = wedge_cli("audit-causal --model grassmann --leaky --positions 0,5 " + small);
  CHECK(leak.status == 1);
  CHECK(leak.out.find("NOT causal") != std::string::npos);
  CHECK(leak.out.find("t=0") != std::string::npos);
  const std::string sheaf = "--model sheaf " + small + " --patch 3 --section-dim 6 --state-size 4 --expert-d-ff 8";
  const Run s = wedge_cli("audit-causal " + sheaf);
  CHECK_MESSAGE(s.status == 0, s.out);
  const Run sleak = wedge_cli("audit-causal --leaky " + sheaf);
  CHECK(sleak.status == 1);
  CHECK(sleak.out.find("NOT causal") != std::string::npos);
}

TEST_CASE("wedge params --model sheaf --json: the total and its parts") {
  if (!have_cli()) return;
  CHECK(params_total("--model sheaf") == 13'260'976);
  const Run r = wedge_cli("params --model sheaf --json");
  REQUIRE(r.status == 0);
  const auto last_line = r.out.rfind('\n', r.out.size() - 2);  // the JSON object is the last line
  const auto j = nlohmann::json::parse(r.out.substr(last_line == std::string::npos ? 0 : last_line + 1));
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
  CHECK(table.status == 0);
  CHECK(table.out.find("1,110,148,055,040") != std::string::npos);

  const Run rank = wedge_cli("params --model grassmann --rank 300");
  CHECK(rank.status == 1);
  CHECK(rank.out.find("error: --rank 300 must be at most --d-model 256") != std::string::npos);
  const Run wide = wedge_cli("params --d-model 2000000");
  CHECK(wide.status == 1);
  CHECK(wide.out.find("error: --d-model 2000000 must be at most 1048576") != std::string::npos);
  const Run overflow =
      wedge_cli("params --model sheaf --layers 4096 --types 4096 --section-dim 1048576 --cover-depth 6 --json");
  CHECK(overflow.status == 1);
  CHECK(overflow.out.find("error: the parameter count does not fit in 64 bits") != std::string::npos);
  const Run nli = wedge_cli("params --task nli --layers 5000");
  CHECK(nli.status == 1);
  CHECK(nli.out.find("error: --layers must be at most 4096, got 5000") != std::string::npos);
}

TEST_CASE("wedge audit-causal refuses a model this machine cannot hold before building it") {
  if (!have_cli()) return;
  if (!std::filesystem::exists("/proc/meminfo")) {
    MESSAGE("skipped: no /proc/meminfo to compare with");
    return;
  }
  // 1.8 * 10^16 parameters: no machine holds their weights (72 PB).
  const Run r = wedge_cli("audit-causal --d-model 1048576 --layers 4096");
  CHECK(r.status == 1);
  CHECK_MESSAGE(r.out.find("error: the model has 18,023,265,400,258,560 parameters and needs ~") == 0, r.out);
  CHECK(r.out.find("for its weights; this machine has") != std::string::npos);
}

TEST_CASE("wedge ops lists every op with the CPU, and CUDA whenever it is built in") {
  if (!have_cli()) return;
  const Run r = wedge_cli("ops");
  REQUIRE_MESSAGE(r.status == 0, r.out);
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
