// What the harnesses share: a scratch file for readers that take a path, and a check that
// stops the run with a message (a broken promise of the code under test is a finding, like
// a crash).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace wedge::fuzz {

// Stops the run with the failed condition; libFuzzer saves the input as a crash.
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A file named after the process, so parallel fuzzing jobs (-jobs=N) never share one, in
// memory (/dev/shm) when there is such a folder, else in the temp folder; removed when the
// process ends normally. Writing it on every input is most of a file reader's time per run.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name)
      : path_(folder() / ("wedge-fuzz-" + std::to_string(::getpid()) + "-" + name)) {}
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& write(std::string_view bytes) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::fprintf(stderr, "cannot write the scratch file %s\n", path_.c_str());
      std::abort();
    }
    return path_;
  }

 private:
  static std::filesystem::path folder() {
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
    return std::filesystem::temp_directory_path();
  }

  std::filesystem::path path_;
};

}  // namespace wedge::fuzz
