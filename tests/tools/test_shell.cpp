// shell.h, the runner of the suites that test the binary: standard output and standard error
// come back apart and whole, however the command interleaves its writes to them.
#include <doctest/doctest.h>

#include <string>

#include "shell.h"

using wedge::testing::shell;

TEST_CASE("shell: a line of standard output stays whole when standard error is written in its middle") {
  // 200 KB of standard output in one line, with a standard-error line written halfway: more
  // than a pipe holds, so the reader must drain both streams as they fill.
  const wedge::testing::ShellRun r = shell(
      "head -c 100000 /dev/zero | tr '\\0' a; echo 'a note' >&2; head -c 100000 /dev/zero | tr '\\0' b; echo; "
      "echo '{\"loss\": 1.5}'; exit 3");
  CHECK(r.exit_code() == 3);
  CHECK(r.err == "a note\n");
  REQUIRE(r.out.size() == 200000 + 1 + 14);
  CHECK(r.out.find_first_not_of('a') == 100000);
  CHECK(r.out.find_first_not_of('b', 100000) == 200000);
  CHECK(r.last_json().at("loss").get<double>() == 1.5);
  CHECK(r.text() == r.err + r.out);
}

TEST_CASE("shell: standard input is empty, and a signal is no exit code") {
  CHECK(shell("cat").out.empty());  // never waits on the terminal
  const wedge::testing::ShellRun killed = shell("kill -9 $$");
  CHECK(killed.status != 0);
  CHECK(killed.exit_code() == -1);
}
