// The run folder's rules (tools/run_folder.h) and the checked, atomic writes under them
// (engine/atomic_file.h): one writer at a time, no run replaced by accident, no torn or
// repeated metrics lines, no checkpoint from non-finite weights, metadata read with checks.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/atomic_file.h"
#include "tools/run_folder.h"
#include "trainer_support.h"

using namespace wedge;
using namespace wedge::tools;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every file in `dir` whose name holds ".tmp": what a failed or killed write could leave.
std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) out.push_back(e.path().string());
  return out;
}

// While alive, a file may not grow past `bytes`: writes fail as on a full disk (EFBIG
// instead of ENOSPC; SIGXFSZ is ignored so the write returns the error).
struct FileSizeLimit {
  explicit FileSizeLimit(rlim_t bytes) {
    previous_signal = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &previous);
    rlimit l = previous;
    l.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &l);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &previous);
    std::signal(SIGXFSZ, previous_signal);
  }
  rlimit previous{};
  void (*previous_signal)(int);
};

// The message of the std::runtime_error `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("an atomic write replaces the file whole, or fails and leaves the previous file and no temporary") {
  const std::string dir = testing::fresh_run_dir("atomic");
  fs::create_directories(dir);
  const std::string path = dir + "/file.txt";
  write_file_atomic(path, "first\n");
  CHECK(slurp(path) == "first\n");
  write_file_atomic(path, "second\n", /*durable=*/false);
  CHECK(slurp(path) == "second\n");
  {
    AtomicFile abandoned(path);
    abandoned.write("never committed");
    CHECK(fs::exists(abandoned.temporary_path()));
  }
  CHECK(slurp(path) == "second\n");
  CHECK(temporaries(dir).empty());

  const std::string big(64 * 1024, 'x');
  {
    FileSizeLimit limit(16 * 1024);
    CHECK(has(error_of([&] { write_file_atomic(path, big); }), "cannot write " + path));
  }
  CHECK(slurp(path) == "second\n");
  CHECK(temporaries(dir).empty());
  CHECK_THROWS_WITH_AS(write_file_atomic(dir + "/no/such/folder/file", "x"), doctest::Contains("no/such/folder/file"),
                       std::runtime_error);
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint that cannot be written whole leaves the previous one intact") {
  const std::string dir = testing::fresh_run_dir("atomic_ck");
  fs::create_directories(dir);
  const std::string path = dir + "/w.safetensors";
  save_safetensors(path, {{"w", Tensor::full({4}, 1.5)}}, {});
  const std::string before = slurp(path);
  {
    FileSizeLimit limit(4096);
    CHECK_THROWS_AS(save_safetensors(path, {{"w", Tensor::full({8192}, 2.0)}}, {}), std::runtime_error);
  }
  CHECK(slurp(path) == before);
  CHECK(temporaries(dir).empty());
  fs::remove_all(dir);
}

TEST_CASE("one writer per run folder: a second one fails at once, naming the owner; the lock ends with its owner") {
  const std::string dir = testing::fresh_run_dir("lock");
  {
    RunFolder first = RunFolder::create(dir, false, "");
    CHECK(has(error_of([&] { RunFolder::create(dir, true, ""); }),
              "in use by another training (process " + std::to_string(::getpid()) + ")"));
    first.begin({{"model", "x"}});
    CHECK_THROWS_WITH_AS(RunFolder::resume(dir), doctest::Contains("in use by another training"), std::runtime_error);
  }
  // Released: the run can be resumed now (and a moved-from folder holds no lock).
  RunFolder again = RunFolder::resume(dir);
  RunFolder moved = std::move(again);
  CHECK(moved.read_config().at("model") == "x");
  fs::remove_all(dir);
}

TEST_CASE("a run that fails before it begins leaves no folder behind, and never removes one it did not make") {
  const std::string dir = testing::fresh_run_dir("unbegun");
  { RunFolder f = RunFolder::create(dir, false, ""); }  // e.g. the corpus could not be read
  CHECK(!fs::exists(dir));
  // Moved before it is dropped: the folder goes once, with its last owner.
  {
    RunFolder a = RunFolder::create(dir, false, "");
    RunFolder b = std::move(a);
    CHECK(fs::exists(dir + "/.lock"));
  }
  CHECK(!fs::exists(dir));
  // A folder that was there already stays, and so does one holding anything else.
  fs::create_directories(dir);
  { RunFolder f = RunFolder::create(dir, false, ""); }
  CHECK(fs::is_directory(dir));
  fs::remove_all(dir);
  {
    RunFolder f = RunFolder::create(dir, false, "");
    std::ofstream(dir + "/notes.txt") << "mine\n";
  }
  CHECK(fs::exists(dir + "/notes.txt"));
  fs::remove_all(dir);
}

TEST_CASE("a fresh run refuses a folder holding a run; --overwrite replaces it only when the new run begins") {
  const std::string dir = testing::fresh_run_dir("overwrite");
  {
    RunFolder f = RunFolder::create(dir, false, "");
    f.begin({{"run", 1}});
    f.append_metrics({{"step", 1}});
    f.save_checkpoint("best.safetensors", {{"w", Tensor::ones({2})}}, {}, 1);
  }
  const std::string refused = error_of([&] { RunFolder::create(dir, false, ", or continue it"); });
  CHECK(has(refused, "already holds a run"));
  CHECK(has(refused, "--overwrite"));
  CHECK(has(refused, ", or continue it"));
  {
    RunFolder f = RunFolder::create(dir, true, "");
    CHECK(fs::exists(dir + "/best.safetensors"));  // nothing is removed before the new run begins
    f.begin({{"run", 2}});
    CHECK_FALSE(fs::exists(dir + "/best.safetensors"));
    CHECK(slurp(dir + "/metrics.jsonl").empty());
    CHECK(f.read_config().at("run") == 2);
  }
  fs::remove_all(dir);
}

TEST_CASE("resuming puts metrics.jsonl back to the checkpoint's step: a torn line and later steps go") {
  const std::string dir = testing::fresh_run_dir("metrics");
  {
    RunFolder f = RunFolder::create(dir, false, "");
    f.begin({});
    for (int step = 1; step <= 9; ++step) f.append_metrics({{"step", step}, {"loss", 1.0 / step}});
    f.append_metrics({{"eval", "valid"}, {"step", 6}, {"ppl", 3.0}});
  }
  std::ofstream(dir + "/metrics.jsonl", std::ios::app) << R"({"step": 10, "lo)";  // a kill mid-line
  RunFolder f = RunFolder::resume(dir);
  f.resume_metrics(6);
  f.append_metrics({{"step", 7}, {"loss", 0.5}});
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<std::int64_t> steps;
  std::string line;
  while (std::getline(in, line)) steps.push_back(nlohmann::json::parse(line).at("step").get<std::int64_t>());
  CHECK(steps == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 6, 7});
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint is never written from non-finite values; the error names the last good one") {
  const std::string dir = testing::fresh_run_dir("finite");
  RunFolder f = RunFolder::create(dir, false, "");
  f.begin({});
  CHECK(f.last_good().find("none") != std::string::npos);
  f.save_checkpoint("last.safetensors", {{"w", Tensor::full({3}, 2.0)}}, {{"note", "good"}}, 40);
  const std::string good = slurp(dir + "/last.safetensors");
  CHECK(f.last_good() == dir + "/last.safetensors (step 40)");
  for (const double bad : {NAN, INFINITY, -INFINITY}) {
    Tensor w = Tensor::full({3}, 2.0);
    w.data<float>()[1] = static_cast<float>(bad);
    const std::string message = error_of([&] { f.save_checkpoint("last.safetensors", {{"w", w}}, {}, 50); });
    CHECK(has(message, "by step 50"));
    CHECK(has(message, "'w' holds NaN or Inf"));
    CHECK(has(message, "last good checkpoint is " + dir + "/last.safetensors (step 40)"));
    CHECK(slurp(dir + "/last.safetensors") == good);
  }
  const SafeTensors back = f.load_checkpoint("last.safetensors");
  CHECK(metadata_int(back, "step", "x") == 40);
  CHECK(back.metadata.at("note") == "good");
  // A file holding NaN (written by another tool, or an older wedge) is refused on load.
  Tensor nan_w = Tensor::full({2}, 1.0);
  nan_w.data<float>()[0] = NAN;
  save_safetensors(dir + "/nan.safetensors", {{"w", nan_w}}, {});
  CHECK_THROWS_WITH_AS(f.load_checkpoint("nan.safetensors"), doctest::Contains("'w' holds NaN or Inf"), std::runtime_error);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint metadata is read with checks that name the file and the key") {
  SafeTensors st;
  st.metadata = {{"step", "-5"}, {"big", "99999999999999999999999"}, {"text", "abc"}, {"ppl", "inf"}, {"nan", "nan"},
                 {"seed", "18446744073709551615"}, {"ok", "12"}};
  CHECK(metadata_int(st, "ok", "f") == 12);
  CHECK_THROWS_WITH_AS(metadata_int(st, "step", "ck.safetensors"),
                       doctest::Contains("checkpoint 'ck.safetensors': metadata 'step' is \"-5\", expected an integer >= 0"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(metadata_int(st, "big", "f"), doctest::Contains("metadata 'big'"), std::runtime_error);
  CHECK_THROWS_WITH_AS(metadata_int(st, "text", "f"), doctest::Contains("metadata 'text'"), std::runtime_error);
  CHECK_THROWS_WITH_AS(metadata_int(st, "absent", "f"), doctest::Contains("metadata 'absent' is missing"), std::runtime_error);
  CHECK(std::isinf(metadata_double(st, "ppl", "f")));
  CHECK_THROWS_WITH_AS(metadata_double(st, "nan", "f"), doctest::Contains("expected a number"), std::runtime_error);
  CHECK_THROWS_WITH_AS(metadata_double(st, "text", "f"), doctest::Contains("metadata 'text'"), std::runtime_error);
  CHECK(metadata_uint(st, "seed", "f") == 18446744073709551615ull);
  CHECK_THROWS_WITH_AS(metadata_uint(st, "step", "f"), doctest::Contains("a non-negative integer"), std::runtime_error);
}
