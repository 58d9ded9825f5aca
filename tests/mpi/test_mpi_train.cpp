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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/allocator.h"
#include "engine/cuda_allocator.h"
#include "engine/nccl.h"
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

// The tensors (weights and AdamW moments) whose bits differ between two checkpoints; empty
// when they agree bit for bit.
std::vector<std::string> differing_tensors(const std::string& a, const std::string& b) {
  const wedge::SafeTensors x = wedge::load_safetensors(a), y = wedge::load_safetensors(b);
  REQUIRE(x.tensors.size() == y.tensors.size());
  std::vector<std::string> differ;
  for (const auto& [name, t] : x.tensors) {
    REQUIRE(y.tensors.count(name) == 1);
    const wedge::Tensor& u = y.tensors.at(name);
    REQUIRE(t.numel() == u.numel());
    if (std::memcmp(t.raw_data(), u.raw_data(), static_cast<std::size_t>(t.numel()) * wedge::dtype_size(t.dtype())) != 0)
      differ.push_back(name);
  }
  return differ;
}

// The run's result: the JSON object rank 0 prints last on standard output, a line of its own.
nlohmann::json result_of(const ShellRun& r) { return r.last_json(); }

// The lines of standard output. With --json a training prints one there, its result; under
// mpirun only rank 0 writes to it.
long stdout_lines(const ShellRun& r) { return std::count(r.out.begin(), r.out.end(), '\n'); }

// `args` (a command line ending in --out) in one process into `alone`, then on n ranks
// under mpirun into `split`; both must succeed.
std::pair<ShellRun, ShellRun> alone_and_on(int n, const std::string& args, const std::string& alone, const std::string& split) {
  ShellRun a = one(args + alone);
  REQUIRE_MESSAGE(a.status == 0, a.text());
  ShellRun b = ranks(n, args + split);
  REQUIRE_MESSAGE(b.status == 0, b.text());
  return {a, b};
}

const std::string kSizes =
    "--layers 1 --d-model 16 --d-ff 32 --heads 2 --rank 4 --block 16 --lr 3e-3 --seed 3 --max-steps 20 --eval-every 10 "
    "--json";
const std::string kTiny = kSizes + " --batch 4";

// Batches of 8 rows in pieces of 2: 4 pieces, shared by 1, 2 or 4 processes.
const std::string kPieces = kSizes + " --batch 8 --micro-batch 2 --deterministic";
const std::string kSheafSizes = " --patch 4 --cover-depth 2 --types 2 --state-size 4 --section-dim 8 --expert-d-ff 16";

std::string model_args(const std::string& model) {
  return "--model " + model + (model == "transformer" ? " --dropout 0.1" : model == "sheaf" ? kSheafSizes : "");
}

}  // namespace

TEST_CASE("mpirun -np 2 wedge train repeats the single-process run (TransformerLM with dropout, GrassmannLM, SheafStateLM)") {
  for (const std::string model : {"transformer", "grassmann", "sheaf"}) {
    INFO(model);
    // Dropout on for one model: each rank must draw the masks one process draws for its rows.
    // SheafStateLM: the ranks add their expert counts before the backward (its balance term).
    const std::string args = model_args(model) + " " + kTiny;
    const std::string single = fresh("one_" + model), two = fresh("two_" + model);
    const ShellRun a = one("train " + args + " --out " + single);
    REQUIRE_MESSAGE(a.status == 0, a.text());
    const ShellRun b = ranks(2, "train " + args + " --out " + two);
    REQUIRE_MESSAGE(b.status == 0, b.text());
    CHECK(b.text().find("ranks: 2 processes") != std::string::npos);
    // Rank 0 alone reports: one "training:" line, one final JSON object.
    CHECK(stdout_lines(a) == 1);
    CHECK(stdout_lines(b) == 1);
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

TEST_CASE("under mpirun standard output is rank 0's: what another rank prints there goes to its standard error") {
  // mpirun forwards each rank's streams in pieces of whatever size it read, so another
  // rank's line could otherwise land inside rank 0's result line. --version prints on every
  // rank: once on standard output, and the other two ranks' copies on standard error.
  const ShellRun r = ranks(3, "--version");
  REQUIRE_MESSAGE(r.status == 0, r.text());
  const auto copies = [](const std::string& s) {
    long n = 0;
    for (std::size_t at = s.find("CPU kernels: "); at != std::string::npos; at = s.find("CPU kernels: ", at + 1)) ++n;
    return n;
  };
  CHECK_MESSAGE(copies(r.out) == 1, r.out);
  CHECK_MESSAGE(copies(r.err) == 2, r.err);
  CHECK(r.out.rfind("wedge ", 0) == 0);
}

TEST_CASE("a --batch that the ranks cannot share evenly is one clear error, before any run folder exists") {
  const std::string out = fresh("odd");
  const ShellRun r = ranks(2, "train " + kSizes + " --batch 3 --out " + out);
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.text().find("error: --batch is 3, not divisible by the 2 processes") != std::string::npos, r.text());
  CHECK(!fs::exists(out + "/config.json"));
  fs::remove_all(out);
}

TEST_CASE("a checkpoint written by 2 ranks resumes in 1 process, and one written by 1 process on 2 ranks") {
  const std::string args = "--model transformer " + kTiny;
  const std::string single = fresh("whole"), split = fresh("split");
  REQUIRE(one("train " + args + " --out " + single).status == 0);
  const ShellRun first = ranks(2, "train " + args + " --stop-after 13 --out " + split);
  REQUIRE_MESSAGE(first.status == 0, first.text());
  CHECK(read_metrics(split).losses.size() == 13);
  const ShellRun second = one("train --resume --json --out " + split);
  REQUIRE_MESSAGE(second.status == 0, second.text());
  CHECK(second.text().find("resumed from") != std::string::npos);
  check_close(read_metrics(single).losses, read_metrics(split).losses, "loss");
  CHECK(max_weight_difference(single + "/last.safetensors", split + "/last.safetensors") <= kWeightTolerance);
  // The other way round: 1 process first, then 2 ranks, with dropout on (its stream's state
  // travels from rank 0 to rank 1 with the checkpoint's).
  const std::string with_dropout = args + " --dropout 0.1", whole = fresh("whole_dropout"), joined = fresh("joined");
  REQUIRE(one("train " + with_dropout + " --out " + whole).status == 0);
  REQUIRE(one("train " + with_dropout + " --stop-after 7 --out " + joined).status == 0);
  const ShellRun grown = ranks(2, "train --resume --json --out " + joined);
  REQUIRE_MESSAGE(grown.status == 0, grown.text());
  CHECK(grown.text().find("ranks: 2 processes") != std::string::npos);
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
  REQUIRE_MESSAGE(a.status == 0, a.text());
  REQUIRE_MESSAGE(a.text().find("training: 10 steps (5 per epoch)") != std::string::npos, a.text());
  const ShellRun b = ranks(2, args + dir + "/two");
  REQUIRE_MESSAGE(b.status == 0, b.text());
  const Metrics ma = read_metrics(dir + "/one"), mb = read_metrics(dir + "/two");
  CHECK(ma.losses.size() == 10);
  check_close(ma.losses, mb.losses, "loss");
  check_close(ma.ppls, mb.ppls, "valid ppl");
  CHECK(max_weight_difference(dir + "/one/last.safetensors", dir + "/two/last.safetensors") <= kWeightTolerance);
  fs::remove_all(dir);
}

// ---- pieces, the fixed summation order, ZeRO-1 -------------------------------------------------


TEST_CASE("--deterministic: 1, 2 and 4 processes give bit-identical weights and moments") {
  for (const std::string model : {"transformer", "grassmann", "sheaf"}) {
    INFO(model);
    const std::string args = "train " + model_args(model) + " " + kPieces + " --out ";
    const std::string n1 = fresh("det1_" + model), n2 = fresh("det2_" + model), n4 = fresh("det4_" + model);
    const ShellRun a = one(args + n1);
    REQUIRE_MESSAGE(a.status == 0, a.text());
    CHECK_MESSAGE(a.text().find("pieces: every batch in 4 pieces of 2 rows, 4 per process") != std::string::npos, a.text());
    const ShellRun b = ranks(2, args + n2);
    REQUIRE_MESSAGE(b.status == 0, b.text());
    const ShellRun c = ranks(4, args + n4);
    REQUIRE_MESSAGE(c.status == 0, c.text());
    CHECK(differing_tensors(n1 + "/last.safetensors", n2 + "/last.safetensors").empty());
    CHECK(differing_tensors(n1 + "/last.safetensors", n4 + "/last.safetensors").empty());
    // The evaluations, summed over the ranks' batches, agree up to the order of their sums.
    check_close(read_metrics(n1).ppls, read_metrics(n4).ppls, "valid ppl");
    for (const std::string& dir : {n1, n2, n4}) fs::remove_all(dir);
  }
  // Without the fixed order, one process adds the 4 pieces left to right and 2 ranks add two
  // pairs: the same math, other roundings, other bits (which is what the order is for).
  const std::string loose = "train --model grassmann " + kSizes + " --batch 8 --micro-batch 2 --out ";
  const std::string l1 = fresh("loose1"), l2 = fresh("loose2");
  REQUIRE(one(loose + l1).status == 0);
  REQUIRE(ranks(2, loose + l2).status == 0);
  CHECK(!differing_tensors(l1 + "/last.safetensors", l2 + "/last.safetensors").empty());
  CHECK(max_weight_difference(l1 + "/last.safetensors", l2 + "/last.safetensors") <= kWeightTolerance);
  fs::remove_all(l1);
  fs::remove_all(l2);
}

TEST_CASE("--deterministic with several pieces per process overlaps the backward and keeps the bits") {
  // 8 pieces of one row: 4 per process on 2 processes, whose sum is
  // (p0 + p1) + (p2 + p3): the last piece's buckets complete it with two additions, in
  // that order, during its backward (another grouping gives other bits).
  const std::string args = "train " + model_args("grassmann") + " " + kSizes + " --batch 8 --micro-batch 1 --deterministic --out ";
  const std::string n1 = fresh("det_pieces1"), n2 = fresh("det_pieces2");
  const auto [a, b] = alone_and_on(2, args, n1, n2);
  CHECK(differing_tensors(n1 + "/last.safetensors", n2 + "/last.safetensors").empty());
  CHECK(result_of(b).at("comm_overlap").get<double>() > 0.5);
  fs::remove_all(n1);
  fs::remove_all(n2);
}

TEST_CASE("--micro-batch in one process accumulates the whole batch's gradient") {
  const std::string args = "train --model transformer --dropout 0.1 " + kSizes + " --batch 8 --out ";
  const std::string whole = fresh("acc_whole"), pieces = fresh("acc_pieces");
  REQUIRE(one(args + whole).status == 0);
  const ShellRun r = one(args + pieces + " --micro-batch 2");
  REQUIRE_MESSAGE(r.status == 0, r.text());
  check_close(read_metrics(whole).losses, read_metrics(pieces).losses, "loss");
  CHECK(max_weight_difference(whole + "/last.safetensors", pieces + "/last.safetensors") <= kWeightTolerance);
  // SheafStateLM's balance term is no mean over rows: each piece first counts the whole
  // batch's routing (a forward without gradients), and then follows the one-piece run too,
  // on one process and on two (two pieces each).
  const std::string sheaf = "train " + model_args("sheaf") + " " + kSizes + " --batch 8 --out ";
  const std::string s_whole = fresh("acc_sheaf_whole"), s_pieces = fresh("acc_sheaf_pieces"), s_two = fresh("acc_sheaf_two");
  REQUIRE(one(sheaf + s_whole).status == 0);
  const ShellRun s = one(sheaf + s_pieces + " --micro-batch 2");
  REQUIRE_MESSAGE(s.status == 0, s.text());
  CHECK_MESSAGE(s.text().find("each piece first runs forward once without gradients") != std::string::npos, s.text());
  REQUIRE(ranks(2, sheaf + s_two + " --micro-batch 2").status == 0);
  for (const std::string& run : {s_pieces, s_two}) {
    INFO(run);
    check_close(read_metrics(s_whole).losses, read_metrics(run).losses, "loss");
    CHECK(max_weight_difference(s_whole + "/last.safetensors", run + "/last.safetensors") <= kWeightTolerance);
    fs::remove_all(run);
  }
  fs::remove_all(s_whole);
  fs::remove_all(whole);
  fs::remove_all(pieces);
}

TEST_CASE("--zero 1 shards the moments and changes no bit; its checkpoints resume with any N") {
  for (const std::string model : {"transformer", "grassmann"}) {
    INFO(model);
    const std::string args = "train " + model_args(model) + " " + kPieces + " --out ";
    const std::string plain = fresh("plain_" + model), zero = fresh("zero_" + model);
    REQUIRE(ranks(2, args + plain).status == 0);
    const ShellRun z = ranks(2, args + zero + " --zero 1");
    REQUIRE_MESSAGE(z.status == 0, z.text());
    CHECK_MESSAGE(z.text().find("ZeRO-1: each keeps the optimizer state of") != std::string::npos, z.text());
    CHECK(differing_tensors(plain + "/last.safetensors", zero + "/last.safetensors").empty());
    // Stopped on 2 sharded ranks, resumed in 1 process; stopped in 1, resumed on 4 sharded.
    const std::string down = fresh("zero_down_" + model), up = fresh("zero_up_" + model);
    REQUIRE(ranks(2, args + down + " --zero 1 --stop-after 13").status == 0);
    const ShellRun d = one("train --resume --json --out " + down);
    REQUIRE_MESSAGE(d.status == 0, d.text());
    REQUIRE(one(args + up + " --stop-after 7").status == 0);
    const ShellRun u = ranks(4, "train --resume --zero 1 --json --out " + up);
    REQUIRE_MESSAGE(u.status == 0, u.text());
    CHECK(differing_tensors(plain + "/last.safetensors", down + "/last.safetensors").empty());
    CHECK(differing_tensors(plain + "/last.safetensors", up + "/last.safetensors").empty());
    for (const std::string& dir : {plain, zero, down, up}) fs::remove_all(dir);
  }
}

TEST_CASE("pieces that cannot be shared, or a fixed order that cannot hold, are one clear error each") {
  const std::string out = fresh("bad_pieces");
  const std::vector<std::pair<int, std::pair<std::string, std::string>>> cases = {
      {1, {"--batch 4 --micro-batch 3", "--micro-batch is 3, which does not divide --batch (4)"}},
      {1, {"--batch 4 --micro-batch 5", "--micro-batch is 5; it must be at most --batch (4), or 0 for one piece"}},
      {2, {"--batch 4 --micro-batch 4", "--batch 4 in pieces of --micro-batch 4 makes 1 pieces, which the 2 processes"}},
      {1, {"--batch 4 --deterministic", "--deterministic needs --micro-batch"}},
      {3, {"--batch 6 --micro-batch 1 --deterministic", "--deterministic runs on 1, 2, 4, 8, ... processes (a power of two), not 3"}},
  };
  for (const auto& [n, c] : cases) {
    const auto& [flags, message] = c;
    INFO(flags);
    const ShellRun r = n == 1 ? one("train " + kSizes + " " + flags + " --out " + out) : ranks(n, "train " + kSizes + " " + flags + " --out " + out);
    CHECK(r.status != 0);
    CHECK_MESSAGE(r.text().find("error: " + message) != std::string::npos, r.text());
    CHECK(!fs::exists(out + "/config.json"));
  }
  fs::remove_all(out);
}

TEST_CASE("the sum over ranks overlaps the backward pass and keeps the bits of one all-reduce") {
  // Two layers of width 256 make several buckets of about 4 MB; one piece per rank, so the
  // last (only) piece's backward completes each rank's sum and the buckets leave during it.
  const std::string args =
      "train --model transformer --layers 2 --d-model 256 --d-ff 1024 --heads 4 --block 16 --lr 1e-3 --seed 5 "
      "--max-steps 4 --eval-every 4 --json --batch 8 --micro-batch 4 --deterministic --out ";
  const std::string n1 = fresh("overlap1"), n2 = fresh("overlap2"), z2 = fresh("overlap2_zero");
  const auto [a, b] = alone_and_on(2, args, n1, n2);
  CHECK(differing_tensors(n1 + "/last.safetensors", n2 + "/last.safetensors").empty());
  const auto result = result_of(b);
  CHECK(result.at("comm_overlap").get<double>() > 0.5);
  CHECK(result.at("comm_bytes_per_step").get<double>() > 4.0 * 1e6);  // one copy of a ~1.6 M float gradient
  // ZeRO-1: the buckets' reduce-scatters leave during the backward too, with the same bits.
  const ShellRun z = ranks(2, args + z2 + " --zero 1");
  REQUIRE_MESSAGE(z.status == 0, z.text());
  CHECK(differing_tensors(n1 + "/last.safetensors", z2 + "/last.safetensors").empty());
  CHECK(result_of(z).at("comm_overlap").get<double>() > 0.5);
  fs::remove_all(z2);
  // One process sends nothing.
  const auto single = result_of(a);
  CHECK(single.at("comm_overlap").get<double>() == 0);
  CHECK(single.at("comm_bytes_per_step").get<double>() == 0);
  fs::remove_all(n1);
  fs::remove_all(n2);
}

// ---- The sentence-pair task -----------------------------------------------------------------

TEST_CASE("--task nli under mpirun: 2 processes repeat one; --deterministic gives the same bits on 1, 2 and 4") {
  const wedge::testing::Folder f = wedge::testing::snli_folder("mpi_snli");
  // Dropout is on (the head's default, 0.1): each rank must draw the masks of its rows.
  const std::string args = "train --task nli --data-dir " + f.dir.string() + " --vocab " + f.vocab.string() +
                           " --train-pairs 96 --epochs 2 --batch 32 --layers 1 --d-model 16 --heads 2 --d-ff 32 --patch 4 "
                           "--section-dim 8 --state-size 4 --lr 3e-3 --seed 4 --log-every 1 --json ";
  {
    const std::string n1 = fresh("nli1"), n2 = fresh("nli2");
    const auto [a, b] = alone_and_on(2, args + "--out ", n1, n2);
    CHECK_MESSAGE(b.text().find("ranks: 2 processes (MPI), each computing 16 rows of every batch of 32") != std::string::npos, b.text());
    // The training losses and the selection losses agree up to the order of float sums.
    const Metrics ma = read_metrics(n1), mb = read_metrics(n2);
    CHECK(ma.losses.size() == 2 * 3 + 2);  // 3 steps and one selection per epoch
    check_close(ma.losses, mb.losses, "loss");
    CHECK(max_weight_difference(n1 + "/last.safetensors", n2 + "/last.safetensors") <= kWeightTolerance);
    // The ranks share the evaluations' batches; rank 0 reports for both, once.
    const auto ra = result_of(a), rb = result_of(b);
    CHECK(std::abs(ra["select"]["correct"].get<int>() - rb["select"]["correct"].get<int>()) <= 1);
    CHECK(ra["test"]["count"] == rb["test"]["count"]);
    CHECK(stdout_lines(a) == 1);
    CHECK(stdout_lines(b) == 1);
    fs::remove_all(n1);
    fs::remove_all(n2);
  }
  {
    // The SheafState head in pieces of 8 rows, summed in the fixed order: one process, two,
    // and four with ZeRO-1 write the same bits (and so select the same epoch).
    const std::string fixed = args + "--head sheaf --micro-batch 8 --deterministic --out ";
    const std::string n1 = fresh("nli_fixed1"), n2 = fresh("nli_fixed2"), n4 = fresh("nli_fixed4");
    const auto [a, b] = alone_and_on(2, fixed, n1, n2);
    const ShellRun c = ranks(4, fixed + n4 + " --zero 1");
    REQUIRE_MESSAGE(c.status == 0, c.text());
    for (const char* name : {"/last.safetensors", "/best.safetensors"}) {
      CHECK(differing_tensors(n1 + name, n2 + name).empty());
      CHECK(differing_tensors(n1 + name, n4 + name).empty());
    }
    CHECK(result_of(a)["test"] == result_of(c)["test"]);
    fs::remove_all(n1);
    fs::remove_all(n2);
    fs::remove_all(n4);
  }
  {
    // On a frozen backbone: rank 0 reads the language model and sends it to the other
    // rank, which then computes the same token states (the same bits in the fixed order).
    std::string text;
    for (int i = 0; i < 100; ++i) text += "a man sits outside . two kids play .\n";
    std::ofstream(f.dir / "lm.txt") << text;
    const std::string lm = fresh("nli_backbone_lm");
    const ShellRun trained = one("train --data text --train " + (f.dir / "lm.txt").string() + " --vocab " + f.vocab.string() +
                                 " --layers 1 --d-model 8 --heads 2 --d-ff 16 --block 32 --batch 8 --max-steps 2 --json --out " + lm);
    REQUIRE_MESSAGE(trained.status == 0, trained.text());
    const std::string on = args + "--backbone " + lm + " --max-length 16 --micro-batch 8 --deterministic --out ";
    const std::string n1 = fresh("nli_bb1"), n2 = fresh("nli_bb2");
    const auto [a, b] = alone_and_on(2, on, n1, n2);
    for (const char* name : {"/last.safetensors", "/best.safetensors"}) CHECK(differing_tensors(n1 + name, n2 + name).empty());
    CHECK(result_of(a)["test"] == result_of(b)["test"]);
    fs::remove_all(n1);
    fs::remove_all(n2);
    fs::remove_all(lm);
  }
  fs::remove_all(f.dir);
}

// ---- GPU ranks: NCCL ------------------------------------------------------------------------

TEST_CASE("GPU ranks sum through NCCL with the bits of the host's sums (runs where a GPU is present)") {
  if (!wedge::dist::nccl_built() || !wedge::has_allocator(wedge::DeviceKind::CUDA)) {
    MESSAGE("no NCCL in this build or no GPU on this machine: the NCCL checks did not run");
    return;
  }
  // One process without mpirun sums its pieces on the host; one rank under mpirun sums them
  // on its GPU and runs every collective through NCCL (a communicator of one). Same bits.
  const std::string args = "train --device cuda " + model_args("grassmann") + " " + kPieces + " --out ";
  const std::string plain = fresh("gpu_plain"), nccl = fresh("gpu_nccl1");
  const auto [a, b] = alone_and_on(1, args, plain, nccl);
  CHECK_MESSAGE(result_of(b).at("collectives").get<std::string>().rfind("NCCL ", 0) == 0, b.text());
  CHECK(result_of(a).at("collectives").get<std::string>().empty());
  CHECK(differing_tensors(plain + "/last.safetensors", nccl + "/last.safetensors").empty());
  std::vector<std::string> dirs = {plain, nccl};
#ifdef WEDGE_HAVE_CUDA
  // Two GPUs or more: two ranks, each taking its own GPU, whole and with ZeRO-1.
  if (wedge::cuda::device_count() >= 2) {
    const std::string two = fresh("gpu_nccl2"), zero = fresh("gpu_nccl2_zero");
    const ShellRun c = ranks(2, args + two);
    REQUIRE_MESSAGE(c.status == 0, c.text());
    CHECK_MESSAGE(c.text().find("(NCCL ") != std::string::npos, c.text());
    const ShellRun d = ranks(2, args + zero + " --zero 1");
    REQUIRE_MESSAGE(d.status == 0, d.text());
    // The buckets went on the collectives' own stream during the backward pass.
    CHECK(result_of(c).at("comm_overlap").get<double>() > 0.5);
    CHECK(result_of(d).at("comm_overlap").get<double>() > 0.5);
    CHECK(differing_tensors(plain + "/last.safetensors", two + "/last.safetensors").empty());
    CHECK(differing_tensors(plain + "/last.safetensors", zero + "/last.safetensors").empty());
    dirs.insert(dirs.end(), {two, zero});
  } else {
    MESSAGE("one GPU: the checks of two NCCL ranks did not run");
  }
#endif
  for (const std::string& dir : dirs) fs::remove_all(dir);
}
