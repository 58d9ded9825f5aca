// SHA-256 (FIPS 180-4), streaming: a fingerprint of a file or of bytes in memory, e.g. to
// record which checkpoint, vocabulary or data file a run was made from and to notice when
// one has changed under it. Not a constant-time implementation: it hashes public data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace wedge {

class Sha256 {
 public:
  Sha256();
  // Appends bytes; the message may be fed in pieces of any size (the digest is the same).
  void update(const void* data, std::size_t bytes);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // The digest of everything fed so far as 64 lowercase hex digits. The object is left as
  // it was, so more bytes may follow and hex() be asked again.
  std::string hex() const;

 private:
  void compress(const unsigned char* block);
  std::uint32_t state_[8];
  unsigned char buffer_[64];
  std::size_t buffered_ = 0;  // bytes of buffer_ in use (< 64)
  std::uint64_t length_ = 0;  // bytes fed in all
};

// The digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);
// The digest of a file's bytes, read in chunks (a file of any size in constant memory).
// Throws std::runtime_error("cannot read <path>: <reason>") when the file cannot be opened
// or read (the reason is the system's, e.g. "No such file or directory").
std::string sha256_file(const std::string& path);

}  // namespace wedge
