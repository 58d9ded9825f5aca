// Data-parallel training under mpirun against one process: `mpirun -np 2 wedge train` of a
// tiny TransformerLM and GrassmannLM repeats the single-process run with the same global
// batch and seed (losses, perplexities, saved weights) up to the order of float sums; a
// batch that does not split evenly is one clear error; a checkpoint written by 2 ranks
// resumes in 1 process.
//
// Built and registered only when CMake found MPI and its launcher (CMakeLists.txt).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/safetensors.h"
#include "tools/trainer_support.h"

namespace fs = std::filesystem;
using wedge::testing::shell;
using wedge::testing::ShellRun;

namespace {

// Open MPI refuses root without both variables; one thread per rank keeps 2 ranks on 2
// cores from fighting over them (and makes each rank's GEMMs sum in one order).
const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 WEDGE_NUM_THREADS=1 ";

ShellRun one(const std::string& args) { return shell(kEnv + WEDGE_CLI + " " + args); }
ShellRun ranks(int n, const std::string& args) {
  return shell(kEnv + WEDGE_MPIRUN + " -np " + std::to_string(n) + " " + WEDGE_CLI + " " + args);
}

std::string fresh(const std::string& name) { return wedge::testing::fresh_run_dir("mpi_" + name); }

struct Metrics {
  std::vector<double> losses, ppls;
};
Metrics read_metrics(const std::string& run) {
  Metrics m;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) m.losses.push_back(j["loss"].get<double>());
    if (j.contains("ppl")) m.ppls.push_back(j["ppl"].get<double>());
  }
  return m;
}

// The largest |a - b| over every parameter of two checkpoints (the optimizer's moments,
// "*.adam_m" / "*.adam_v", included), after checking they hold the same tensors.
double max_weight_difference(const std::string& a, const std::string& b) {
  const wedge::SafeTensors x = wedge::load_safetensors(a), y = wedge::load_safetensors(b);
  REQUIRE(x.tensors.size() == y.tensors.size());
  double worst = 0;
  for (const auto& [name, t] : x.tensors) {
    INFO(name);
    REQUIRE(y.tensors.count(name) == 1);
    const std::vector<float> u = t.to_vector<float>(), v = y.tensors.at(name).to_vector<float>();
    REQUIRE(u.size() == v.size());
    for (std::size_t i = 0; i < u.size(); ++i) worst = std::max(worst, std::abs(double(u[i]) - double(v[i])));
  }
  return worst;
}

// How far apart the two runs may drift. They differ only in the order of float32 sums: the
// batch's loss and gradient are added over 2 ranks' halves instead of over all rows at once,
// each partial sum rounded (float32: relative error ~6e-8 per addition). AdamW divides each
// gradient by its running RMS, which keeps relative errors relative, so after 20 steps of
// lr 3e-3 on weights of size ~0.1-1 the weights agree to ~1e-7 (measured: 6e-8 to 1e-7);
// 1e-5 leaves a margin of 100 for elements whose gradient is near 0, where
// m / (sqrt(v) + eps) amplifies rounding. Losses and perplexities are means of such
// numbers; a relative 1e-5 is as generous. A real mistake (a missing share, a rank's rows
// counted twice, other dropout masks, unsynchronised weights) moves them by 1e-3 or more.
constexpr double kWeightTolerance = 1e-5;
constexpr double kLossTolerance = 1e-5;

void check_close(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(what);
    CAPTURE(i);
    CHECK(std::abs(a[i] - b[i]) <= kLossTolerance * std::max(1.0, std::abs(a[i])));
  }
}

const std::string kSizes =
    "--layers 1 --d-model 16 --d-ff 32 --heads 2 --rank 4 --block 16 --lr 3e-3 --seed 3 --max-steps 20 --eval-every 10 "
    "--json";
const std::string kTiny = kSizes + " --batch 4";

}  // namespace

TEST_CASE("mpirun -np 2 wedge train repeats the single-process run (TransformerLM with dropout, GrassmannLM)") {
  for (const std::string model : {"transformer", "grassmann"}) {
    INFO(model);
    // Dropout on for one model: each rank must draw the masks one process draws for its rows.
    const std::string args = "--model " + model + " " + kTiny + (model == "transformer" ? " --dropout 0.1" : "");
    const std::string single = fresh("one_" + model), two = fresh("two_" + model);
    const ShellRun a = one("train " + args + " --out " + single);
    REQUIRE_MESSAGE(a.status == 0, a.out);
    const ShellRun b = ranks(2, "train " + args + " --out " + two);
    REQUIRE_MESSAGE(b.status == 0, b.out);
    CHECK(b.out.find("ranks: 2 processes") != std::string::npos);
    // Rank 0 alone reports: one "training:" line, one final JSON object.
    CHECK(std::count(b.out.begin(), b.out.end(), '{') == std::count(a.out.begin(), a.out.end(), '{'));
    const Metrics ma = read_metrics(single), mb = read_metrics(two);
    CHECK(ma.losses.size() == 20);
    CHECK(ma.ppls.size() == 2);
    check_close(ma.losses, mb.losses, "loss");
    check_close(ma.ppls, mb.ppls, "valid ppl");
    const double dw = max_weight_difference(single + "/last.safetensors", two + "/last.safetensors");
    MESSAGE(model << ": max |w1 - w2| after 20 steps " << dw << ", final loss " << ma.losses.back() << " vs "
                  << mb.losses.back());
    CHECK(dw <= kWeightTolerance);
    fs::remove_all(single);
    fs::remove_all(two);
  }
}

TEST_CASE("a --batch that the ranks cannot share evenly is one clear error, before any run folder exists") {
  const std::string out = fresh("odd");
  const ShellRun r = ranks(2, "train " + kSizes + " --batch 3 --out " + out);
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.out.find("error: --batch is 3, not divisible by the 2 processes") != std::string::npos, r.out);
  CHECK(!fs::exists(out + "/config.json"));
  fs::remove_all(out);
}

TEST_CASE("a checkpoint written by 2 ranks resumes in 1 process, and one written by 1 process on 2 ranks") {
  const std::string args = "--model transformer " + kTiny;
  const std::string single = fresh("whole"), split = fresh("split");
  REQUIRE(one("train " + args + " --out " + single).status == 0);
  const ShellRun first = ranks(2, "train " + args + " --stop-after 13 --out " + split);
  REQUIRE_MESSAGE(first.status == 0, first.out);
  CHECK(read_metrics(split).losses.size() == 13);
  const ShellRun second = one("train --resume --json --out " + split);
  REQUIRE_MESSAGE(second.status == 0, second.out);
  CHECK(second.out.find("resumed from") != std::string::npos);
  check_close(read_metrics(single).losses, read_metrics(split).losses, "loss");
  CHECK(max_weight_difference(single + "/last.safetensors", split + "/last.safetensors") <= kWeightTolerance);
  // The other way round: 1 process first, then 2 ranks, with dropout on (its stream's state
  // travels from rank 0 to rank 1 with the checkpoint's).
  const std::string with_dropout = args + " --dropout 0.1", whole = fresh("whole_dropout"), joined = fresh("joined");
  REQUIRE(one("train " + with_dropout + " --out " + whole).status == 0);
  REQUIRE(one("train " + with_dropout + " --stop-after 7 --out " + joined).status == 0);
  const ShellRun grown = ranks(2, "train --resume --json --out " + joined);
  REQUIRE_MESSAGE(grown.status == 0, grown.out);
  CHECK(grown.out.find("ranks: 2 processes") != std::string::npos);
  check_close(read_metrics(whole).losses, read_metrics(joined).losses, "loss");
  CHECK(max_weight_difference(whole + "/last.safetensors", joined + "/last.safetensors") <= kWeightTolerance);
  for (const std::string& dir : {single, split, whole, joined}) fs::remove_all(dir);
}

TEST_CASE("an epoch's short last batch may leave a rank no rows: it still joins every update") {
  // 140 training tokens in blocks of 8: 17 blocks, batches of 4, 4, 4, 4 and 1, so rank 1 has
  // nothing to compute on each epoch's last step; 2 epochs cross that step twice, with
  // dropout on (the idle rank must catch up with the masks' stream). The validation split's
  // last window is padded: ignored targets in the evaluation the ranks share.
  const std::string dir = fresh("text");
  fs::create_directories(dir);
  std::ofstream(dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\nsat\non\nmat\n.\n";
  {
    std::ofstream train(dir + "/train.txt"), valid(dir + "/valid.txt");
    for (int i = 0; i < 20; ++i) train << (i % 2 ? "the mat sat on the cat .\n" : "the cat sat on the mat .\n");
    for (int i = 0; i < 6; ++i) valid << (i % 2 ? "the mat sat on the cat .\n" : "the cat sat on the mat .\n");
  }
  const std::string args = "train --data text --train " + dir + "/train.txt --valid " + dir + "/valid.txt --vocab " + dir +
                           "/vocab.txt --layers 1 --d-model 16 --d-ff 32 --heads 2 --block 8 --batch 4 --epochs 2 "
                           "--dropout 0.1 --json --out ";
  const ShellRun a = one(args + dir + "/one");
  REQUIRE_MESSAGE(a.status == 0, a.out);
  REQUIRE_MESSAGE(a.out.find("training: 10 steps (5 per epoch)") != std::string::npos, a.out);
  const ShellRun b = ranks(2, args + dir + "/two");
  REQUIRE_MESSAGE(b.status == 0, b.out);
  const Metrics ma = read_metrics(dir + "/one"), mb = read_metrics(dir + "/two");
  CHECK(ma.losses.size() == 10);
  check_close(ma.losses, mb.losses, "loss");
  check_close(ma.ppls, mb.ppls, "valid ppl");
  CHECK(max_weight_difference(dir + "/one/last.safetensors", dir + "/two/last.safetensors") <= kWeightTolerance);
  fs::remove_all(dir);
}
