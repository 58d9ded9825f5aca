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

namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("wedge_cli_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p.string();
}

struct Run {
  int status = -1;
  std::string out;
};

Run run(const std::string& args) {
  Run r;
  std::FILE* p = ::popen((std::string(WEDGE_CLI) + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.out += buf;
  r.status = ::pclose(p);
  return r;
}

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
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(fs::exists(out + "/last.safetensors"));
  CHECK_FALSE(fs::exists(out + "/last.safetensors.tmp"));
  const std::size_t steps_done = count_lines(out + "/metrics.jsonl");
  Run resumed = run("train --resume --out " + out + " --stop-after 2 --log-every 1");
  CHECK(resumed.status == 0);
  CHECK(resumed.out.find("resumed from") != std::string::npos);
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
  CHECK(r.out.find("error: train: the loss became") != std::string::npos);
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
  CHECK(t.out.find("sample: ") != std::string::npos);
  Run e = run("eval --run " + out + " --split test");
  CHECK(e.status == 0);
  CHECK(e.out.find("synthetic test perplexity") != std::string::npos);
  Run g1 = run("generate --run " + out + " --prompt \"the cat\" --max-new-tokens 8 --seed 5");
  Run g2 = run("generate --run " + out + " --prompt \"the cat\" --max-new-tokens 8 --seed 5");
  CHECK(g1.status == 0);
  CHECK(g1.out == g2.out);
  CHECK(g1.out.rfind("the cat ", 0) == 0);
  Run missing = run("eval --run " + out + "_nope");
  CHECK(missing.status != 0);
  CHECK(missing.out.find("config.json is missing") != std::string::npos);
  Run nodata = run("train --data wikitext2 --data-dir /nonexistent/wt2 --out " + out + "_wt");
  CHECK(nodata.status != 0);
  CHECK(nodata.out.find("/nonexistent/wt2") != std::string::npos);
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
  CHECK(t.out.find("validation: the last 5 %") != std::string::npos);
  Run e = run("eval --run " + out + " --split valid");
  CHECK(e.status == 0);
  CHECK(e.out.find("text valid perplexity") != std::string::npos);
  Run no_test = run("eval --run " + out + " --split test");
  CHECK(no_test.status != 0);
  CHECK(no_test.out.find("--test FILE") != std::string::npos);
  Run misplaced = run("train --train " + dir + "/mine.txt --out " + out + "_x");
  CHECK(misplaced.status != 0);
  CHECK(misplaced.out.find("--data text only") != std::string::npos);
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
           {"train --head grassmann --out /nonexistent/x", "--head"}}) {
    CAPTURE(args);
    const Run r = run(args);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 1);
    CHECK(r.out.rfind("error: ", 0) == 0);
    CHECK(r.out.find(named) != std::string::npos);
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  }
  const Run help = run("classify --help");
  CHECK(WEXITSTATUS(help.status) == 0);
  CHECK(help.out.find("premise<TAB>hypothesis") != std::string::npos);
}
