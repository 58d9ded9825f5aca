// Running a command line as a user would, for the suites that test the `wedge` binary: its
// exit status, and its standard output and standard error apart.
//
// Apart, because the two streams are not one ordered text. Results are read from standard
// output (a `--json` line), progress and errors go to standard error, and under mpirun the
// launcher forwards each rank's streams in pieces of whatever size it read: merged into one
// pipe, a line of standard output of a few kilobytes can arrive with standard-error lines
// spliced into its middle. So a result is parsed from `out` alone; `text()` is for looking
// a message up wherever it was printed.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace wedge::testing {

struct ShellRun {
  int status = -1;  // the wait status: 0 when the command exited with 0
  std::string out;  // standard output
  std::string err;  // standard error

  // The exit code, or -1 when a signal ended the command.
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  // Both streams, standard error first: for finding a message, not for parsing.
  std::string text() const { return err + out; }
  // The last line of standard output as JSON (the result a `--json` command prints last).
  nlohmann::json last_json() const {
    std::string lines = out;
    while (!lines.empty() && lines.back() == '\n') lines.pop_back();
    return nlohmann::json::parse(lines.substr(lines.rfind('\n') + 1));  // npos + 1 is 0: a single line
  }
};

// Runs `command` with /bin/sh, standard input from /dev/null, and reads both of its output
// streams to their end (polling both, so a command that fills one pipe never blocks on it).
// Throws when the shell cannot be started.
inline ShellRun shell(const std::string& command) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error("cannot make a pipe for: " + command);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw std::runtime_error("cannot make a pipe for: " + command);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    throw std::runtime_error("cannot start a shell for: " + command);
  }
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    const int null_in = ::open("/dev/null", O_RDONLY);
    if (null_in >= 0) ::dup2(null_in, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ShellRun r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* into[2] = {&r.out, &r.err};
  int open = 2;
  char buf[65536];
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      const ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        into[k]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[k].fd);
        fds[k].fd = -1;  // poll ignores negative descriptors
        --open;
      }
    }
  }
  for (const pollfd& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

}  // namespace wedge::testing
