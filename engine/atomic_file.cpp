#include "engine/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace wedge {

namespace {

std::atomic<unsigned long> g_counter{0};

std::string reason(int err) {
  if (err == ENOSPC) return "no space left on the device";
  if (err == EDQUOT) return "disk quota exceeded";
  return std::strerror(err);
}

}  // namespace

AtomicFile::AtomicFile(std::string path, bool durable) : path_(std::move(path)), durable_(durable) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw std::runtime_error("cannot write " + path_ + ": cannot create " + tmp_ + " (" + reason(err) + ")");
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  discard();
  committed_ = true;  // nothing left to clean up
  throw std::runtime_error("cannot write " + path_ + ": " + what + " (" + reason(err) + "); the previous file is unchanged");
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (fd_ < 0) throw std::logic_error("AtomicFile::write after commit: " + path_);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    if (n == 0) fail("write made no progress", EIO);
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw std::logic_error("AtomicFile::commit twice: " + path_);
  if (durable_ && ::fsync(fd_) != 0) fail("fsync failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    committed_ = true;
    throw std::runtime_error("cannot write " + path_ + ": close failed (" + reason(err) + "); the previous file is unchanged");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    committed_ = true;
    throw std::runtime_error("cannot write " + path_ + ": rename failed (" + reason(err) + "); the previous file is unchanged");
  }
  committed_ = true;
  if (durable_) {
    // The rename itself becomes durable with the folder's entry.
    const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
}

void write_file_atomic(const std::string& path, std::string_view content, bool durable) {
  AtomicFile f(path, durable);
  f.write(content);
  f.commit();
}

}  // namespace wedge
