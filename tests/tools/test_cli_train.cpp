// The training commands through the real `wedge` binary: Ctrl-C checkpoints and exits
// cleanly, a diverging run stops with a clear message, eval/generate read a run.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "engine/distributed.h"
#include "trainer_support.h"

namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("wedge_cli_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p.string();
}

using Run = wedge::testing::ShellRun;
using wedge::testing::shell;

Run run(const std::string& args) { return shell(std::string(WEDGE_CLI) + " " + args); }

std::size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

const char* kTiny = "--layers 1 --d-model 16 --d-ff 32 --heads 2 --block 16 --batch 4 --log-every 1";

}  // namespace

TEST_CASE("Ctrl-C finishes the step, writes a checkpoint and exits cleanly; --resume continues") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("sigint");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    ::execl(WEDGE_CLI, WEDGE_CLI, "train", "--out", out.c_str(), "--max-steps", "100000", "--layers", "1", "--d-model",
            "16", "--d-ff", "32", "--block", "16", "--batch", "4", (char*)nullptr);
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count_lines(out + "/metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(count_lines(out + "/metrics.jsonl") >= 3);
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);  // stopped by Ctrl-C, after checkpointing
  CHECK(fs::exists(out + "/last.safetensors"));
  for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().string().find(".tmp") == std::string::npos);
  const std::size_t steps_done = count_lines(out + "/metrics.jsonl");
  Run resumed = run("train --resume --out " + out + " --stop-after 2 --log-every 1");
  CHECK(WEXITSTATUS(resumed.status) == 0);
  CHECK(resumed.text().find("resumed from") != std::string::npos);
  CHECK(count_lines(out + "/metrics.jsonl") >= steps_done + 2);
  fs::remove_all(out);
}

TEST_CASE("a diverging run stops with a clear message and keeps the last good checkpoint") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("nan");
  Run r = run(std::string("train --out ") + out + " " + kTiny + " --lr 1e30 --clip 1e30 --warmup 0 --max-steps 50");
  CHECK(r.status != 0);
  CHECK(r.text().find("error: train: the loss became") != std::string::npos);
  fs::remove_all(out);
}

TEST_CASE("eval and generate read a run directory; bad input is named") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("use");
  Run t = run(std::string("train --out ") + out + " " + kTiny + " --max-steps 20 --eval-every 10");
  REQUIRE(t.status == 0);
  CHECK(t.text().find("sample: ") != std::string::npos);
  Run e = run("eval --run " + out + " --split test");
  CHECK(e.status == 0);
  CHECK(e.text().find("synthetic test perplexity") != std::string::npos);
  Run g1 = run("generate --run " + out + " --prompt \"the cat\" --max-new-tokens 8 --seed 5");
  Run g2 = run("generate --run " + out + " --prompt \"the cat\" --max-new-tokens 8 --seed 5");
  CHECK(g1.status == 0);
  CHECK(g1.out == g2.out);
  CHECK(g1.out.rfind("the cat ", 0) == 0);
  Run missing = run("eval --run " + out + "_nope");
  CHECK(missing.status != 0);
  CHECK(missing.text().find("config.json is missing") != std::string::npos);
  Run nodata = run("train --data wikitext2 --data-dir /nonexistent/wt2 --out " + out + "_wt");
  CHECK(nodata.status != 0);
  CHECK(nodata.text().find("/nonexistent/wt2") != std::string::npos);
  Run plot = run("plot " + out + " -o " + out + "/curves.svg");
  CHECK(plot.status == 0);
  CHECK(fs::exists(out + "/curves.svg"));
  fs::remove_all(out);
  fs::remove_all(out + "_wt");
}

TEST_CASE("train --data text through the command line; its flags are refused elsewhere") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string dir = temp_dir("text");
  fs::create_directories(dir);
  std::ofstream(dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\nsat\non\nmat\n.\n";
  {
    std::ofstream text(dir + "/mine.txt");
    for (int i = 0; i < 200; ++i) text << (i % 2 ? "the cat sat on the mat .\n" : "the mat sat on the cat .\n");
  }
  const std::string out = dir + "/run";
  Run t = run("train --data text --train " + dir + "/mine.txt --vocab " + dir +
              "/vocab.txt --layers 1 --d-model 16 --d-ff 32 --heads 2 --block 16 --batch 4 --max-steps 5 --out " + out);
  CHECK(t.status == 0);
  CHECK(t.text().find("validation: the last 5 %") != std::string::npos);
  Run e = run("eval --run " + out + " --split valid");
  CHECK(e.status == 0);
  CHECK(e.text().find("text valid perplexity") != std::string::npos);
  Run no_test = run("eval --run " + out + " --split test");
  CHECK(no_test.status != 0);
  CHECK(no_test.text().find("--test FILE") != std::string::npos);
  Run misplaced = run("train --train " + dir + "/mine.txt --out " + out + "_x");
  CHECK(misplaced.status != 0);
  CHECK(misplaced.text().find("--data text only") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a bad flag is one `error:` line naming it, and exit status 1") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {"train --task nli --block 64 --out /nonexistent/x", "--block"},
           {"eval --run x --split nope", "--split"},
           {"params --no-such-flag", "--no-such-flag"},
           {"train --head grassmann --out /nonexistent/x", "--head"},
           // Nonsense values: each refused before anything runs, naming the flag.
           {"train --out /nonexistent/x --log-every 0", "--log-every"},
           {"train --out /nonexistent/x --lr -1", "--lr"},
           {"train --out /nonexistent/x --lr nan", "--lr"},
           {"train --out /nonexistent/x --clip nan", "--clip"},
           {"train --out /nonexistent/x --weight-decay -0.1", "--weight-decay"},
           {"train --out /nonexistent/x --max-steps 0", "--max-steps"},
           {"train --out /nonexistent/x --seed -5", "--seed"},
           {"train --out /nonexistent/x --resume --overwrite", "--overwrite"},
           {"generate --run x --prompt a --temperature nan", "--temperature"},
           {"generate --run x --prompt a --max-new-tokens -1", "--max-new-tokens"},
           {"eval --run x --batch -1", "--batch"},
           {"bench-step --batch 0", "--batch"},
           {"bench-step --precision fp16", "--precision"},
           {"eval --run x --precision half", "--precision"},
           {"train --out /nonexistent/x --precision int8", "--precision"},
           {"params --model grassmann --rank 300 --d-model 256", "--rank"}}) {
    CAPTURE(args);
    const Run r = run(args);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 1);
    CHECK(r.err.rfind("error: ", 0) == 0);
    CHECK(r.err.find(named) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
  }
  const Run help = run("classify --help");
  CHECK(WEXITSTATUS(help.status) == 0);
  CHECK(help.text().find("premise<TAB>hypothesis") != std::string::npos);
}

TEST_CASE("--version names the version and the build") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const Run v = run("--version");
  CHECK(WEXITSTATUS(v.status) == 0);
  CHECK(v.out.rfind("wedge ", 0) == 0);
  CHECK(v.text().find("CPU kernels: ") != std::string::npos);
  CHECK(v.text().find("CUDA backend: ") != std::string::npos);
  CHECK(v.text().find(wedge::dist::mpi_built() ? "data parallel: MPI" : "data parallel: not built") != std::string::npos);
}

namespace {

// Starts `wedge train` on `out` in the background (stdout discarded) and waits until it has
// logged `lines` metrics lines.
pid_t start_training(const std::string& out, std::size_t lines) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execl(WEDGE_CLI, WEDGE_CLI, "train", "--out", out.c_str(), "--max-steps", "100000", "--layers", "1", "--d-model", "16",
            "--d-ff", "32", "--block", "16", "--batch", "4", "--log-every", "1", (char*)nullptr);
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count_lines(out + "/metrics.jsonl") < lines && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(count_lines(out + "/metrics.jsonl") >= lines);
  return pid;
}

}  // namespace

TEST_CASE("two trainings on one folder: the second fails at once and the first is undisturbed") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("two_writers");
  const pid_t first = start_training(out, 3);
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& args : {"train --overwrite --out " + out, "train --resume --out " + out}) {
    const Run second = run(args + " --max-steps 5");
    CHECK(WEXITSTATUS(second.status) == 1);
    CHECK(second.text().find("is in use by another training (process " + std::to_string(first) + ")") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  ::kill(first, SIGINT);
  int status = 0;
  ::waitpid(first, &status, 0);
  CHECK(WEXITSTATUS(status) == 130);
  // The first run's folder is whole: it resumes.
  const Run resumed = run("train --resume --out " + out + " --stop-after 1");
  CHECK(WEXITSTATUS(resumed.status) == 0);
  fs::remove_all(out);
}

TEST_CASE("a second Ctrl-C ends the process at once with status 130") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("twice");
  const pid_t pid = start_training(out, 2);
  ::kill(pid, SIGINT);
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  fs::remove_all(out);
}

TEST_CASE("after a hard kill, --resume logs each step once") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("killed");
  REQUIRE(WEXITSTATUS(run("train --out " + out + " " + kTiny + " --max-steps 40 --eval-every 8 --stop-after 8").status) == 0);
  // Steps 9..12 logged, then killed mid-line: the checkpoint is still the one of step 8.
  {
    std::ofstream metrics(out + "/metrics.jsonl", std::ios::app);
    for (int step = 9; step <= 12; ++step) metrics << R"({"step":)" << step << R"(,"loss":9.0})" << "\n";
    metrics << R"({"step":13,"lo)";
  }
  const Run resumed = run("train --resume --out " + out + " --stop-after 6");
  REQUIRE(WEXITSTATUS(resumed.status) == 0);
  std::ifstream in(out + "/metrics.jsonl");
  std::vector<int> loss_steps;
  std::string line;
  while (std::getline(in, line))
    if (line.find("\"loss\"") != std::string::npos && line.find("\"eval\"") == std::string::npos) {
      const auto at = line.find("\"step\":");
      loss_steps.push_back(std::stoi(line.substr(at + 7)));
    }
  std::vector<int> expected;
  for (int step = 1; step <= 14; ++step) expected.push_back(step);
  CHECK(loss_steps == expected);
  fs::remove_all(out);
}

TEST_CASE("divergence: a run at --lr 100 stops with a message and status 1; no checkpoint of it is written") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("lr100");
  const Run r = run("train --out " + out + " --lr 100 --max-steps 60 --eval-every 20");
  CHECK(WEXITSTATUS(r.status) == 1);
  // Which check stops it first depends on the kernels' rounding: a non-finite training loss,
  // or a validation perplexity past any sane bound.
  CHECK((r.text().find("the run diverged") != std::string::npos || r.text().find("the loss became") != std::string::npos));
  CHECK(r.text().find("The last good checkpoint is") != std::string::npos);
  const Run e = run("eval --run " + out);
  CHECK(WEXITSTATUS(e.status) == 1);  // nothing to evaluate: an error, never "perplexity nan"
  fs::remove_all(out);
}

TEST_CASE("a full disk stops the run with one error line; the previous checkpoint and config stay as they were") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("full");
  REQUIRE(WEXITSTATUS(run("train --out " + out + " " + kTiny + " --max-steps 40 --eval-every 10 --stop-after 10").status) == 0);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string last = slurp(out + "/last.safetensors"), config = slurp(out + "/config.json");
  // Files may not grow past 20 KiB (the checkpoint needs more): writes fail as on a full
  // disk. SIGXFSZ is ignored so that the write returns the error instead of killing.
  const Run r = shell("bash -c \"trap '' XFSZ; ulimit -f 20; exec " + std::string(WEDGE_CLI) + " train --resume --out " + out + "\"");
  CHECK(WEXITSTATUS(r.status) == 1);
  CHECK(r.text().find("error: cannot write " + out + "/") != std::string::npos);
  CHECK(slurp(out + "/last.safetensors") == last);
  CHECK(slurp(out + "/config.json") == config);
  for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().string().find(".tmp") == std::string::npos);
  fs::remove_all(out);
}

TEST_CASE("--precision bf16: the startup line names the GEMM path; bench-step's JSON reports it; forcing fp32 is said") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("wedge binary not built; skipped");
    return;
  }
  const std::string out = temp_dir("bf16");
  Run t = run("train --out " + out + " " + kTiny + " --max-steps 6 --precision bf16");
  REQUIRE(t.status == 0);
  CHECK(t.text().find(", bf16 (GEMM: ") != std::string::npos);
  std::ifstream config(out + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(config)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"precision\": \"bf16\"") != std::string::npos);
  // eval runs in the run's precision unless told otherwise
  Run e = run("eval --run " + out + " --json");
  CHECK(e.status == 0);
  CHECK(e.text().find("\"precision\":\"bf16\"") != std::string::npos);
  Run e32 = run("eval --run " + out + " --json --precision fp32");
  CHECK(e32.text().find("\"precision\":\"fp32\"") != std::string::npos);
  Run b = run("bench-step --layers 1 --d-model 16 --d-ff 32 --heads 2 --block 16 --batch 2 --steps 1 --warmup-steps 0 "
              "--precision bf16 --json");
  REQUIRE(b.status == 0);
  CHECK(b.text().find("\"precision\":\"bf16\"") != std::string::npos);
  CHECK(b.text().find("\"kernels\":\"bf16 (GEMM: ") != std::string::npos);
  // the fallback forced through the environment is reported as such
  Run forced = shell("WEDGE_BF16_GEMM=fp32 " + std::string(WEDGE_CLI) +
                     " bench-step --layers 1 --d-model 16 --d-ff 32 --heads 2 --block 16 --batch 2 --steps 1 "
                     "--warmup-steps 0 --precision bf16 --json");
  REQUIRE(forced.status == 0);
  CHECK(forced.text().find("\"kernels\":\"bf16 (GEMM: fp32 ") != std::string::npos);
  Run ops = shell("WEDGE_BF16_GEMM=fp32 " + std::string(WEDGE_CLI) + " ops");
  CHECK(ops.text().find("bf16 GEMM: fp32 (") != std::string::npos);
  fs::remove_all(out);
}

TEST_CASE("--data depsim: train scores the probe at each evaluation, eval prints the table by distance and type") {
  if (!fs::exists(WEDGE_CLI)) {
    MESSAGE("skipped: " << WEDGE_CLI << " not built");
    return;
  }
  const std::string dir = temp_dir("depsim");
  const Run t = run(std::string("train --model grassmann --rank 4 --data depsim ") + kTiny + " --max-steps 4 --out " + dir);
  REQUIRE(t.status == 0);
  CHECK(t.text().find("data: dependency probe: documents of 16 tokens") != std::string::npos);
  CHECK(t.text().find("dependencies  1: ") != std::string::npos);
  const Run e = run("eval --run " + dir + " --split test");
  REQUIRE(e.status == 0);
  CHECK(e.text().find("depsim test perplexity") != std::string::npos);
  CHECK(e.text().find("accuracy on the dependent targets") != std::string::npos);
  for (const char* row : {"        1  ", "      2-3  ", "      4-7  ", "     8-15  "}) CHECK(e.text().find(row) != std::string::npos);
  const Run j = run("eval --run " + dir + " --json");
  REQUIRE(j.status == 0);
  CHECK(j.text().find("\"dependencies\":{\"accuracy\":[") != std::string::npos);
  const Run bad = run(std::string("train --data depsim --block 8 --layers 1 --d-model 16 --max-steps 1 --out ") + dir + "_bad");
  CHECK(bad.status != 0);
  CHECK(bad.text().find("depsim: the document length (--block) is 8; it must be between 16 and 1048576") != std::string::npos);
  fs::remove_all(dir);
}
