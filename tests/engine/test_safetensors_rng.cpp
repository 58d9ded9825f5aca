// safetensors round trips and corrupted files; the counter-based RNG.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/philox.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "ops/ops.h"

using namespace wedge;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("wedge_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// A file with a hand-written header.
std::string with_header(const std::string& json, const std::string& data) {
  std::string s(8, '\0');
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s + json + data;
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, dtypes, shapes, values and metadata") {
  const std::string p = temp_path("rt.safetensors");
  std::map<std::string, Tensor> ts = {
      {"w", Tensor::randn({3, 4}, 1)},
      {"d", Tensor::randn({2}, 2, 0, 1, DType::F64)},
      {"i", Tensor::from_vector<std::int32_t>({1, -2, 3}, {3})},
      {"s", Tensor::scalar(7.0)},
      {"t", ops::transpose(Tensor::randn({2, 3}, 3), 0, 1)},  // non-contiguous input
  };
  save_safetensors(p, ts, {{"step", "42"}});
  CHECK_FALSE(fs::exists(p + ".tmp"));
  SafeTensors back = load_safetensors(p);
  CHECK(back.metadata.at("step") == "42");
  REQUIRE(back.tensors.size() == ts.size());
  CHECK(back.tensors["w"].to_vector<float>() == ts["w"].to_vector<float>());
  CHECK(back.tensors["d"].to_vector<double>() == ts["d"].to_vector<double>());
  CHECK(back.tensors["i"].to_vector<std::int32_t>() == ts["i"].to_vector<std::int32_t>());
  CHECK(back.tensors["s"].shape().empty());
  CHECK(back.tensors["t"].shape() == Shape{3, 2});
  CHECK(back.tensors["t"].to_vector<float>() == ts["t"].to_vector<float>());
  // The header is what other readers expect: 8-byte length, then JSON with data_offsets.
  const std::string raw = read_all(p);
  CHECK(raw.find("\"data_offsets\"") != std::string::npos);
  CHECK(raw.find("\"F32\"") != std::string::npos);
  fs::remove(p);
}

TEST_CASE("truncated, corrupted and mismatched files give clear errors") {
  const std::string p = temp_path("bad.safetensors");
  save_safetensors(p, {{"w", Tensor::randn({8, 8}, 1)}});
  const std::string good = read_all(p);

  SUBCASE("truncated data") {
    write_all(p, good.substr(0, good.size() - 10));
    CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("truncated"), std::runtime_error);
  }
  SUBCASE("truncated header") {
    write_all(p, good.substr(0, 20));
    CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("truncated"), std::runtime_error);
  }
  SUBCASE("tiny file") {
    write_all(p, "abc");
    CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("truncated"), std::runtime_error);
  }
  SUBCASE("bad header JSON") {
    write_all(p, with_header("{\"w\": [1, 2", std::string(16, '\0')));
    CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("not valid JSON"), std::runtime_error);
  }
  SUBCASE("unknown dtype") {
    write_all(p, with_header(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0')));
    CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("unsupported dtype"), std::runtime_error);
  }
  SUBCASE("a tensor name with a terminal escape is shown escaped") {
    write_all(p, with_header(R"({"w\u001b[2J":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0')));
    try {
      load_safetensors(p);
      FAIL("an unsupported dtype was accepted");
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      CHECK(message.find("tensor 'w\\x1b[2J' has unsupported dtype") != std::string::npos);
      CHECK(message.find('\x1b') == std::string::npos);
    }
  }
  SUBCASE("shape does not match the byte range") {
    write_all(p, with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')));
    CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("needs 12"), std::runtime_error);
  }
  SUBCASE("overlapping tensors") {
    write_all(p, with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             std::string(12, '\0')));
    CHECK_THROWS_WITH_AS(load_safetensors(p), doctest::Contains("overlap"), std::runtime_error);
  }
  SUBCASE("random bytes never crash the reader") {
    Generator g(5);
    for (int trial = 0; trial < 200; ++trial) {
      std::string s = good;
      for (int k = 0; k < 4; ++k) s[g.integer(s.size())] = static_cast<char>(g.integer(256));
      write_all(p, s.substr(0, g.integer(s.size() + 1)));
      try {
        load_safetensors(p);
      } catch (const std::runtime_error&) {
      }
    }
  }
  SUBCASE("missing file") {
    CHECK_THROWS_WITH_AS(load_safetensors(p + ".nope"), doctest::Contains("cannot open"), std::runtime_error);
  }
  SUBCASE("a tensor of the wrong shape for the model") {
    Tensor dst = Tensor::zeros({4, 4});
    CHECK_THROWS_WITH_AS(assign_checked(dst, load_safetensors(p).tensors["w"], "w", p),
                         doctest::Contains("model expects float32(4, 4)"), std::runtime_error);
  }
  fs::remove(p);
}

TEST_CASE("the counter-based RNG is reproducible and position-addressable") {
  Tensor a = Tensor::randn({1000}, 99), b = Tensor::randn({1000}, 99), c = Tensor::randn({1000}, 100);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  auto v = a.to(DType::F64).to_vector<double>();
  double mean = 0, var = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) var += (x - mean) * (x - mean) / v.size();
  CHECK(std::abs(mean) < 0.1);
  CHECK(var == doctest::Approx(1.0).epsilon(0.1));
  // Element i depends only on (seed, i): a longer draw starts with the shorter one.
  auto shorter = Tensor::randn({10}, 99).to_vector<float>();
  for (int i = 0; i < 10; ++i) CHECK(shorter[i] == v[i]);
  Generator g1(3), g2(3);
  for (int i = 0; i < 5; ++i) CHECK(g1.uniform() == g2.uniform());
  g1.set_state(3, 0);
  CHECK(g1.uniform() == Generator(3).uniform());
  // dropout masks are a pure function of (seed, offset)
  Tensor x = Tensor::ones({64});
  CHECK(ops::dropout(x, 0.5, true, 11, 0).to_vector<float>() == ops::dropout(x, 0.5, true, 11, 0).to_vector<float>());
  CHECK(ops::dropout(x, 0.5, true, 11, 0).to_vector<float>() != ops::dropout(x, 0.5, true, 11, 64).to_vector<float>());
}

TEST_CASE("a generator's batch slice draws the whole batch's masks for its rows and moves past the whole draw") {
  // 5 rows of 3 x 4 values; a process holding rows 2..3 of them (data parallelism).
  const std::int64_t rows = 5, per_row = 12;
  Generator whole(7), slice(7);
  whole.reserve(100);
  slice.reserve(100);
  const Tensor x = Tensor::ones({rows, 3, 4});
  const std::vector<float> all = ops::dropout(x, 0.5, true, whole.seed(), whole.reserve(rows * per_row)).to_vector<float>();
  slice.set_batch_slice(2, 2, rows);
  const Tensor mine = Tensor::ones({2, 3, 4});
  const std::vector<float> part = ops::dropout(mine, 0.5, true, slice.seed(), slice.reserve(2 * per_row)).to_vector<float>();
  CHECK(part == std::vector<float>(all.begin() + 2 * per_row, all.begin() + 4 * per_row));
  CHECK(slice.offset() == whole.offset());
  // A draw that is not whole rows of the slice is refused rather than misplaced.
  CHECK_THROWS_WITH_AS(slice.reserve(5), doctest::Contains("leading axis is the batch"), std::logic_error);
  CHECK_THROWS_AS(slice.set_batch_slice(4, 2, rows), std::invalid_argument);
  slice.set_batch_slice(0, 1, 1);  // back to plain draws
  const std::uint64_t at = slice.offset();
  CHECK(slice.reserve(5) == at);
  CHECK(slice.offset() == at + 5);
}

TEST_CASE("Philox-4x32-10 matches the published known answer, and uniforms use all four words") {
  // Salmon et al.'s known-answer vector for counter 0 under key 0.
  const Philox4 r = philox4x32(0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  // Element 4c + w is word w of counter c, top 24 bits.
  for (std::uint64_t index : {0ull, 1ull, 2ull, 3ull, 4ull, 4097ull, (1ull << 34) + 6}) {
    const Philox4 block = philox4x32(index / 4, 99);
    CHECK(philox_uniform(99, index) == static_cast<float>(block.v[index % 4] >> 8) / 16777216.0f);
  }
}
