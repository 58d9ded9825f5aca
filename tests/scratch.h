// Small helpers shared by the test suites: a scratch directory removed when it goes out of
// scope, and writing a fixture file.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace wedge::testing {

struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("wedge-test-" + name + "-" + std::to_string(std::random_device{}()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str(const std::string& child = "") const { return (child.empty() ? path : path / child).string(); }
};

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace wedge::testing
