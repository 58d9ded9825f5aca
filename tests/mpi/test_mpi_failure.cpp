// A rank that is killed or stopped in the middle of `mpirun -np 2 wedge train` ends the whole
// job, soon and with a non-zero status, and leaves the run folder as its last checkpoint
// left it: the checkpoint loads, the metrics parse, and the run resumes.
//   - SIGKILL: the launcher sees the process die and ends the other one.
//   - SIGSTOP: no process dies, so only the collectives' timeout (WEDGE_COMM_TIMEOUT) can end
//     rank 0's wait; it says so in one line and aborts the job.
// Each case starts the job in the background and bounds every wait; a guard kills whatever
// the job left running, also when a check fails, so no case hangs the suite or leaves
// processes behind.
//
// Built and registered only when CMake found MPI and its launcher (CMakeLists.txt).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/safetensors.h"
#include "tools/trainer_support.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using wedge::testing::shell;
using wedge::testing::ShellRun;

namespace {

// As in test_mpi_train.cpp: Open MPI refuses root without both variables; one thread per rank.
const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 WEDGE_NUM_THREADS=1";

// A tiny model, for far more steps than any case waits, that evaluates and so writes
// last.safetensors every 50 steps: several checkpoints a second.
constexpr int kCheckpointEvery = 50;
const std::string kEndless =
    "train --model transformer --layers 1 --d-model 16 --d-ff 32 --heads 2 --rank 4 --block 16 --batch 4 --lr 3e-3 "
    "--seed 3 --max-steps 1000000 --log-every 1000 --json --eval-every " +
    std::to_string(kCheckpointEvery);

std::string fresh(const std::string& name) { return wedge::testing::fresh_run_dir("mpi_failure_" + name); }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Polls `done` every 20 ms for at most `seconds`; whether it came true.
bool wait_until(double seconds, const std::function<bool()>& done) {
  const auto start = Clock::now();
  while (!done()) {
    if (seconds_since(start) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The NUL-separated entries of /proc/PID/FILE (environ, cmdline); none when it cannot be read.
std::vector<std::string> proc_entries(pid_t pid, const char* file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file, std::ios::binary);
  std::vector<std::string> entries;
  for (std::string entry; std::getline(in, entry, '\0');) entries.push_back(entry);
  return entries;
}

bool holds(const std::vector<std::string>& entries, const std::string& entry) {
  return std::find(entries.begin(), entries.end(), entry) != entries.end();
}

// `mpirun -np 2 wedge ARGS` in the background, its standard error (where the messages the
// tests look for go) in `log`, its standard output apart in `log`.stdout, so that no piece
// of one lands inside a line of the other. Every process of the job carries a variable
// naming this job in its environment (mpirun hands its own to the ranks it starts), so they
// can be found, and ended, even once mpirun is gone. The destructor kills whatever is left
// of them, stopped processes included, and reaps mpirun.
class BackgroundJob {
 public:
  BackgroundJob(const std::string& name, const std::string& env, const std::string& args, const std::string& log)
      : tag_("WEDGE_FAILURE_TEST_JOB=" + std::to_string(::getpid()) + "_" + name) {
    const std::string command = "exec env " + kEnv + " " + tag_ + " " + env + " " + WEDGE_MPIRUN + " -np 2 " + WEDGE_CLI +
                                " " + args + " > " + log + ".stdout 2> " + log;
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;
  ~BackgroundJob() { end_everything(); }

  // mpirun's exit status (128 + the signal, when one ended it) if it ends within `seconds`.
  std::optional<int> exit_status(double seconds) {
    wait_until(seconds, [&] {
      int status = 0;
      if (!status_ && ::waitpid(pid_, &status, WNOHANG) == pid_)
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return status_.has_value();
    });
    return status_;
  }

  // The process of rank `rank` (its environment says so, and it runs wedge), or 0.
  pid_t rank(int rank) const {
    for (const pid_t pid : processes()) {
      const std::vector<std::string> command = proc_entries(pid, "cmdline");
      if (!command.empty() && fs::path(command[0]).filename() == "wedge" &&
          holds(proc_entries(pid, "environ"), "OMPI_COMM_WORLD_RANK=" + std::to_string(rank)))
        return pid;
    }
    return 0;
  }

 private:
  // Every live process of this job (a zombie's environment reads empty).
  std::vector<pid_t> processes() const {
    std::vector<pid_t> found;
    for (const fs::directory_entry& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const auto pid = static_cast<pid_t>(std::stol(name));
      if (holds(proc_entries(pid, "environ"), tag_)) found.push_back(pid);
    }
    return found;
  }

  void end_everything() {
    for (int pass = 0; pass < 50; ++pass) {
      const std::vector<pid_t> left = processes();
      if (left.empty()) break;
      for (const pid_t pid : left) {
        ::kill(pid, SIGCONT);
        ::kill(pid, SIGKILL);
      }
      exit_status(0.02);
    }
    if (!status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  std::string tag_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Rank 1's process, once the job's run folder holds a checkpoint (waits at most 20 s; then
// the case fails).
pid_t rank_1_after_a_checkpoint(const BackgroundJob& job, const std::string& run, const std::string& log) {
  pid_t pid = 0;
  const bool ready = wait_until(20, [&] { return fs::exists(run + "/last.safetensors") && (pid = job.rank(1)) != 0; });
  REQUIRE_MESSAGE(ready, "no checkpoint, or no rank 1, after 20 s:\n" << read_text(log));
  return pid;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// last.safetensors holds every parameter with its two Adam moments, all finite, from an
// evaluation's step; returns that step.
std::int64_t check_checkpoint(const std::string& path) {
  const wedge::SafeTensors ck = wedge::load_safetensors(path);
  std::size_t parameters = 0;
  for (const auto& entry : ck.tensors) {
    const std::string& name = entry.first;
    const wedge::Tensor& t = entry.second;
    INFO(name);
    const std::vector<float> values = t.to_vector<float>();
    CHECK(std::all_of(values.begin(), values.end(), [](float x) { return std::isfinite(x); }));
    if (ends_with(name, ".adam_m") || ends_with(name, ".adam_v")) continue;
    ++parameters;
    for (const char* moment : {".adam_m", ".adam_v"}) {
      REQUIRE(ck.tensors.count(name + moment) == 1);
      CHECK(ck.tensors.at(name + moment).shape() == t.shape());
    }
  }
  CHECK(parameters > 0);
  CHECK(ck.tensors.size() == 3 * parameters);
  REQUIRE(ck.metadata.count("step") == 1);
  const std::int64_t step = std::stoll(ck.metadata.at("step"));
  CHECK(step > 0);
  CHECK(step % kCheckpointEvery == 0);
  return step;
}

// What a job that ended abruptly must leave in its run folder: a checkpoint that loads,
// config.json and every line of metrics.jsonl whole, the steps logged in order up to at
// least the checkpoint's, and a run that resumes (in one process) from that checkpoint.
void check_run_folder(const std::string& run) {
  const std::int64_t step = check_checkpoint(run + "/last.safetensors");
  CHECK(nlohmann::json::parse(read_text(run + "/config.json")).contains("model"));
  std::ifstream metrics(run + "/metrics.jsonl");
  std::int64_t logged = 0;
  for (std::string line; std::getline(metrics, line);) {
    INFO(line);
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) CHECK(j.at("step").get<std::int64_t>() == ++logged);
  }
  CHECK(logged >= step);
  // Two more steps (a resumed run keeps its length; --stop-after ends this part early).
  const ShellRun resumed = shell(kEnv + " " + WEDGE_CLI + " train --resume --json --stop-after 2 --out " + run);
  CHECK_MESSAGE(resumed.status == 0, resumed.text());
  CHECK_MESSAGE(resumed.text().find("resumed from") != std::string::npos, resumed.text());
}

}  // namespace

TEST_CASE("a rank killed mid-run (SIGKILL) ends the job within seconds; the last checkpoint loads and resumes") {
  const std::string dir = fresh("killed"), run = dir + "/run", log = dir + "/mpirun.log";
  fs::create_directories(dir);
  {
    BackgroundJob job("killed", "", kEndless + " --out " + run, log);
    const pid_t rank_1 = rank_1_after_a_checkpoint(job, run, log);
    const auto killed = Clock::now();
    REQUIRE(::kill(rank_1, SIGKILL) == 0);
    const std::optional<int> status = job.exit_status(30);
    REQUIRE_MESSAGE(status.has_value(), "still running 30 s after rank 1 was killed:\n" << read_text(log));
    CHECK_MESSAGE(*status != 0, read_text(log));
    MESSAGE("rank 1 killed: mpirun exited with status " << *status << " after " << seconds_since(killed) << " s");
  }
  check_run_folder(run);
  fs::remove_all(dir);
}

TEST_CASE("a rank stopped mid-run (SIGSTOP) ends the job through the collectives' timeout, in one line naming it") {
  constexpr double kTimeout = 3;
  const std::string dir = fresh("stopped"), run = dir + "/run", log = dir + "/mpirun.log";
  fs::create_directories(dir);
  {
    BackgroundJob job("stopped", "WEDGE_COMM_TIMEOUT=3", kEndless + " --out " + run, log);
    const pid_t rank_1 = rank_1_after_a_checkpoint(job, run, log);
    const auto stopped = Clock::now();
    REQUIRE(::kill(rank_1, SIGSTOP) == 0);
    const std::optional<int> status = job.exit_status(kTimeout + 20);
    const double took = seconds_since(stopped);
    REQUIRE_MESSAGE(status.has_value(), "still running " << took << " s after rank 1 was stopped:\n" << read_text(log));
    const std::string out = read_text(log);
    CHECK_MESSAGE(*status != 0, out);
    // Rank 0 waited out the timeout in its next collective (not less: nothing else ends it).
    CHECK(took >= kTimeout);
    const std::regex said(
        R"(wedge: rank 0 of 2: no answer from the other ranks within 3 s in )"
        R"((barrier|broadcast|all_gather|all_reduce_sum|reduce_scatter_sum) )"
        R"(\(a process died, hangs or was stopped\); ending the job)");
    CHECK_MESSAGE(std::regex_search(out, said), out);
    MESSAGE("rank 1 stopped: mpirun exited with status " << *status << " after " << took << " s");
  }
  check_run_folder(run);
  fs::remove_all(dir);
}

TEST_CASE("a WEDGE_COMM_TIMEOUT that is not a number of seconds is an error naming it, before any run folder exists") {
  const std::string run = fresh("bad_timeout");
  const ShellRun r = shell(kEnv + " WEDGE_COMM_TIMEOUT=soon " + WEDGE_MPIRUN + " -np 2 " + WEDGE_CLI + " " + kEndless +
                           " --out " + run);
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.text().find("error: WEDGE_COMM_TIMEOUT is 'soon': it must be a number of seconds, 0 or more") !=
                    std::string::npos,
                r.text());
  CHECK(!fs::exists(run + "/config.json"));
  fs::remove_all(run);
}
