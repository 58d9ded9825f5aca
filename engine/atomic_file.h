// Writing a file so that a reader only ever sees the previous file or the complete new one:
// the bytes go to a temporary file unique to this process and this write, every write and
// the close are checked (a full disk is an error, never a short file), the temporary file is
// flushed to the disk when asked (checkpoints, configs), then renamed over the target. On any
// failure the temporary file is removed and the previous file is left as it was.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace wedge {

class AtomicFile {
 public:
  // Opens the temporary file "<path>.tmp.<pid>.<n>" beside `path`. durable: fsync the file
  // before the rename and the folder after it, so a power cut cannot leave an empty file.
  explicit AtomicFile(std::string path, bool durable = true);
  ~AtomicFile();  // without commit(): closes and removes the temporary file
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);  // throws naming the file
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes, closes and renames into place; throws naming the file (and removes the
  // temporary file) when any of that fails.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  void discard();

  std::string path_, tmp_;
  bool durable_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole file in one call.
void write_file_atomic(const std::string& path, std::string_view content, bool durable = true);

}  // namespace wedge
