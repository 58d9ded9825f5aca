// SHA-256 against the FIPS 180-2 test vectors, fed whole and in uneven pieces, and files
// read in chunks against digests computed by coreutils' sha256sum.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/sha256.h"
#include "scratch.h"

using namespace wedge;

namespace {

const std::string kMillionA(1000000, 'a');

// The bytes (7 i + 3) mod 251 for i = 0 .. n-1: no period of 64, zero bytes and bytes >= 0x80.
std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + 3) % 251);
  return s;
}

}  // namespace

TEST_CASE("SHA-256: the FIPS 180-2 vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits in the first block, so padding takes a second one.
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(kMillionA) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256: a message fed in pieces of any size has the digest of the whole") {
  const std::string want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  // 997-byte pieces cross every block boundary at a different place; then pieces of 1, 63,
  // 64 and 65 bytes in turn (the buffered, exact-block and straddling paths).
  for (std::size_t piece : {std::size_t{997}, std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65}}) {
    CAPTURE(piece);
    Sha256 h;
    for (std::size_t at = 0; at < kMillionA.size(); at += piece)
      h.update(std::string_view(kMillionA).substr(at, piece));
    CHECK(h.hex() == want);
  }
  // hex() leaves the running hash as it was: asking mid-way changes nothing.
  Sha256 h;
  h.update("ab");
  CHECK(h.hex() == sha256_hex("ab"));
  h.update("c", 1);
  CHECK(h.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(h.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("sha256_file: files read in chunks, and one-line errors naming the path") {
  testing::ScratchDir dir("sha256");
  // 2^20 + 77 bytes: more than one read chunk, ending inside a block. The digest is
  // sha256sum's of the same bytes.
  const std::string big = pattern((std::size_t{1} << 20) + 77);
  testing::write_file(dir.path / "big.bin", big);
  CHECK(sha256_file(dir.str("big.bin")) == "8a1050ef0cdc69be16f96e6c745e33cc866c40151a5fa39a2b8482813223a85a");
  CHECK(sha256_file(dir.str("big.bin")) == sha256_hex(big));
  testing::write_file(dir.path / "abc.txt", "abc");
  CHECK(sha256_file(dir.str("abc.txt")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  testing::write_file(dir.path / "empty", "");
  CHECK(sha256_file(dir.str("empty")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

  const std::string missing = dir.str("no-such-file");
  CHECK_THROWS_AS(sha256_file(missing), std::runtime_error);
  CHECK_THROWS_WITH(sha256_file(missing), ("cannot read " + missing + ": No such file or directory").c_str());
  // A directory opens but cannot be read.
  CHECK_THROWS_WITH(sha256_file(dir.str()), ("cannot read " + dir.str() + ": Is a directory").c_str());
}
