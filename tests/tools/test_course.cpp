// The course generator (tools/course.sh): every marked region is well formed and graded by
// a ctest of tests/course.cmake; the student tree replaces exactly the regions, each with a
// throw naming its exercise, and keeps every other file as it is. (CI runs `tools/course.sh walk`:
// the student tree compiles, and each exercise's tests fail at its own stub.)
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "trainer_support.h"

namespace fs = std::filesystem;

namespace {

const fs::path kSource = WEDGE_SOURCE_DIR;

using Run = wedge::testing::ShellRun;
using wedge::testing::shell;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("course: every exercise region is well formed and graded, and the student tree strips exactly them") {
  if (!fs::exists(kSource / ".git")) {
    MESSAGE("skipped: the source folder is not a git checkout");
    return;
  }
  const std::string tool = "bash '" + (kSource / "tools/course.sh").string() + "'";
  const Run check = shell(tool + " check");
  INFO(check.text());
  REQUIRE(check.status == 0);
  CHECK(check.text().find("every region well formed and graded") != std::string::npos);

  const fs::path dest = fs::temp_directory_path() / "wedge_course_student";
  fs::remove_all(dest);
  const Run make = shell(tool + " make '" + dest.string() + "'");
  INFO(make.text());
  REQUIRE(make.status == 0);
  // A solution is gone, its throw is there, the markers stay for the student to see.
  const std::string mul = slurp(dest / "ops/elementwise.cpp");
  CHECK(mul.find("sum_to(mul(g, sb)") == std::string::npos);
  CHECK(count(mul, "throw std::logic_error(\"exercise 05: not implemented") == 1);
  CHECK(mul.find("// course 05 end") != std::string::npos);
  const std::string plucker = slurp(dest / "kernels/ref/plucker.cpp");
  CHECK(count(plucker, "exercise 16: not implemented") == 1);
  CHECK(count(plucker, "exercise 17: not implemented") == 1);
  CHECK(plucker.find("plucker_mean_forward") != std::string::npos);  // the unmarked kernels stay
  // The mainline keeps its solutions; unmarked files are copied unchanged.
  CHECK(slurp(kSource / "ops/elementwise.cpp").find("sum_to(mul(g, sb)") != std::string::npos);
  CHECK(slurp(dest / "README.md") == slurp(kSource / "README.md"));
  CHECK(slurp(dest / "ops/nn.cpp") == slurp(kSource / "ops/nn.cpp"));
  // In a CUDA kernel the stub is the macro that throws under the emulation and traps on a GPU.
  const std::string reduce = slurp(dest / "kernels/cuda/reduce.cu");
  CHECK(count(reduce, "WEDGE_COURSE_UNSOLVED(\"exercise 15: not implemented") == 1);
  CHECK(reduce.find("throw std::logic_error(\"exercise") == std::string::npos);
  // A second make into the same folder is refused.
  const Run again = shell(tool + " make '" + dest.string() + "'");
  CHECK(again.status != 0);
  CHECK(again.text().find("already exists") != std::string::npos);
  fs::remove_all(dest);
}
