// Checkpoint files that broke the safetensors reader, byte for byte, found with the libFuzzer
// harness of fuzz/ (fuzz/README.md) and beside it: each asserts what the reader now does —
// a clear error naming the file, or loading a file that is valid.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "engine/safetensors.h"

using namespace wedge;
using namespace std::string_literals;

namespace {

// The harness's way: the bytes in a file, the file to load_safetensors. Returns the error.
std::string load_error(const std::string& bytes) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("wedge_test_fuzz_" + std::to_string(::getpid()) + ".safetensors")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string message;
  try {
    load_safetensors(path);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  std::filesystem::remove(path);
  REQUIRE_MESSAGE(!message.empty(), "the file was accepted");
  CHECK(message.find(path) != std::string::npos);  // names the file
  return message;
}

}  // namespace

TEST_CASE("an empty tensor whose other dimensions multiply past 64 bits is a clear error") {
  // Shape (0, 2^40, 2^40): no bytes, so the element-count bound passed it, and building the
  // tensor's strides overflowed (undefined behaviour; later an exception without the file).
  const std::string input =
      "[\0\0\0\0\0\0\0"s
      R"({"w": {"dtype": "F32", "shape": [0, 1099511627776, 1099511627776], "data_offsets": [0, 0]}})";
  CHECK(input.size() == 99);
  CHECK(load_error(input).find("tensor 'w' shape is implausibly large") != std::string::npos);
}

TEST_CASE("a dimension past the int64 range beside a zero is a clear error") {
  // Shape (0, 2^63): read as the negative dimension -2^63 before.
  const std::string input =
      "R\0\0\0\0\0\0\0"s R"({"w": {"dtype": "F32", "shape": [0, 9223372036854775808], "data_offsets": [0, 0]}})";
  CHECK(input.size() == 90);
  CHECK(load_error(input).find("tensor 'w' shape is implausibly large") != std::string::npos);
}

TEST_CASE("large dimensions that multiply to a readable size still load") {
  // The bound is on the product of the non-zero dimensions: (0, 2^24, 2^24) is 2^48, allowed.
  const std::string json = R"({"w":{"dtype":"F32","shape":[0,16777216,16777216],"data_offsets":[4,4]},"v":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  std::string input(8, '\0');
  for (int i = 0; i < 8; ++i) input[i] = static_cast<char>(json.size() >> (8 * i));
  input += json + "\x07\0\0\0"s;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("wedge_test_fuzz_ok_" + std::to_string(::getpid()) + ".safetensors")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(input.data(), static_cast<std::streamsize>(input.size()));
  }
  const SafeTensors st = load_safetensors(path);
  std::filesystem::remove(path);
  CHECK(st.tensors.at("w").shape() == Shape{0, 16777216, 16777216});
  CHECK(st.tensors.at("w").numel() == 0);
  CHECK(st.tensors.at("v").to_vector<std::int32_t>() == std::vector<std::int32_t>{7});
}

TEST_CASE("an empty tensor at the first byte of another is not an overlap, whatever the names") {
  // "v" sorts before "w" in the header, so "w" = [0, 0] used to be checked against "v" =
  // [0, 4] and refused as overlapping; the safetensors reference accepts this file.
  const std::string json = R"({"v":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  std::string input(8, '\0');
  for (int i = 0; i < 8; ++i) input[i] = static_cast<char>(json.size() >> (8 * i));
  input += json + "\x2a\0\0\0"s;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("wedge_test_fuzz_tie_" + std::to_string(::getpid()) + ".safetensors")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(input.data(), static_cast<std::streamsize>(input.size()));
  }
  const SafeTensors st = load_safetensors(path);
  std::filesystem::remove(path);
  CHECK(st.tensors.at("w").shape() == Shape{0});
  CHECK(st.tensors.at("v").to_vector<std::int32_t>() == std::vector<std::int32_t>{42});
}
