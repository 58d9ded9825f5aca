#include "tools/run_folder.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include "engine/atomic_file.h"
#include "tools/training_support.h"

namespace wedge::tools {

namespace fs = std::filesystem;

namespace {

// The files a run consists of: what --overwrite removes.
constexpr const char* kRunFiles[] = {"config.json", "metrics.jsonl", "last.safetensors", "best.safetensors", "vocab.txt"};

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

}  // namespace

RunFolder::RunFolder(RunFolder&& o) noexcept
    : dir_(std::move(o.dir_)), lock_fd_(o.lock_fd_), replace_(o.replace_), remove_unbegun_(o.remove_unbegun_),
      metrics_(std::move(o.metrics_)), last_good_(std::move(o.last_good_)) {
  o.lock_fd_ = -1;
  o.remove_unbegun_ = false;
}

RunFolder& RunFolder::operator=(RunFolder&& o) noexcept {
  if (this != &o) {
    release();
    dir_ = std::move(o.dir_);
    lock_fd_ = o.lock_fd_;
    replace_ = o.replace_;
    remove_unbegun_ = o.remove_unbegun_;
    o.remove_unbegun_ = false;
    metrics_ = std::move(o.metrics_);
    last_good_ = std::move(o.last_good_);
    o.lock_fd_ = -1;
  }
  return *this;
}

RunFolder::~RunFolder() { release(); }

void RunFolder::release() {
  if (lock_fd_ < 0) return;
  if (remove_unbegun_) {
    // Only the lock file is in a folder made for a run that never began (fs::remove leaves
    // a folder that holds anything else).
    std::error_code ec;
    fs::remove(file(".lock"), ec);
    fs::remove(dir_, ec);
  }
  ::close(lock_fd_);  // closing the descriptor releases the lock
  lock_fd_ = -1;
}

// An advisory lock (flock) on DIR/.lock: the kernel releases it when the process ends in
// any way, so a lock left by a killed run is never in the way; the file holds the owner's
// pid for the message a second writer gets.
void RunFolder::lock() {
  const std::string path = file(".lock");
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    throw std::runtime_error(fmt::format("--out {}: cannot create the lock file {} ({})", dir_, path, std::strerror(errno)));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err != EWOULDBLOCK)
      throw std::runtime_error(fmt::format("--out {}: cannot lock {} ({})", dir_, path, std::strerror(err)));
    const std::string owner = read_small_file(path);
    throw std::runtime_error(fmt::format("--out {} is in use by another training (process {}); wait for it to end or "
                                         "choose another folder",
                                         dir_, owner.empty() ? "unknown" : owner));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    throw std::runtime_error(fmt::format("--out {}: cannot write {} ({})", dir_, path, std::strerror(errno)));
}

RunFolder RunFolder::create(const std::string& dir, bool overwrite, const std::string& continue_hint) {
  RunFolder f;
  f.dir_ = dir;
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error(fmt::format("--out {}: cannot create the folder ({})", dir,
                                         ec ? ec.message() : std::string("a file of that name is in the way")));
  f.lock();
  f.remove_unbegun_ = !existed;
  if (fs::exists(f.config_path())) {
    if (!overwrite)
      throw std::runtime_error("--out " + dir + " already holds a run (" + f.config_path() +
                               "); choose another folder, pass --overwrite to replace it" + continue_hint);
    f.replace_ = true;
  }
  return f;
}

RunFolder RunFolder::resume(const std::string& dir) {
  if (!fs::exists(dir + "/config.json"))
    throw std::runtime_error("train --resume: no run to resume in '" + dir + "' (" + dir + "/config.json is missing)");
  RunFolder f;
  f.dir_ = dir;
  f.lock();
  return f;
}

nlohmann::json RunFolder::read_config() const {
  std::ifstream in(config_path());
  if (!in) throw std::runtime_error(config_path() + " is missing");
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object()) throw std::runtime_error("not a JSON object");
    return j;
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read " + config_path() + ": " + e.what());
  }
}

void RunFolder::write_config(const nlohmann::json& config) { write_file_atomic(config_path(), config.dump(2) + "\n"); }

void RunFolder::open_metrics() {
  metrics_ = std::make_unique<std::ofstream>(metrics_path(), std::ios::app);
  if (!*metrics_) throw std::runtime_error("cannot open " + metrics_path() + " for writing");
}

void RunFolder::begin(const nlohmann::json& config, std::string_view vocab_text) {
  remove_unbegun_ = false;
  if (replace_) {
    std::error_code ec;
    for (const char* name : kRunFiles) fs::remove(file(name), ec);
    replace_ = false;
  }
  if (!vocab_text.empty()) write_file_atomic(file("vocab.txt"), vocab_text);
  write_config(config);
  write_file_atomic(metrics_path(), "", /*durable=*/false);
  open_metrics();
}

void RunFolder::resume_metrics(std::int64_t step) {
  std::string kept;
  {
    std::ifstream in(metrics_path());
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // the last line has no newline: it was torn by a kill
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) continue;
      if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<std::int64_t>() > step) continue;
      kept += line + "\n";
    }
  }
  write_file_atomic(metrics_path(), kept, /*durable=*/false);
  open_metrics();
}

void RunFolder::append_metrics(const nlohmann::json& line) {
  if (!metrics_) throw std::logic_error("RunFolder::append_metrics before start_metrics/resume_metrics");
  *metrics_ << line.dump() << "\n";
  metrics_->flush();
  if (!*metrics_) throw std::runtime_error("cannot write " + metrics_path() + " (is the disk full?); stopping");
}

void RunFolder::save_checkpoint(const std::string& name, const std::map<std::string, Tensor>& tensors,
                                const std::map<std::string, std::string>& metadata, std::int64_t step) {
  for (const auto& [tensor_name, t] : tensors)
    if (!all_finite(t))
      throw std::runtime_error(fmt::format(
          "the weights became non-finite by step {} ('{}' holds NaN or Inf), so {} was not written; stopping. The last "
          "good checkpoint is {} — try a lower --lr or a stronger --clip",
          step, tensor_name, file(name), last_good()));
  std::map<std::string, std::string> meta = metadata;
  meta["step"] = std::to_string(step);
  save_safetensors(file(name), tensors, meta);
  if (name == "last.safetensors") last_good_ = fmt::format("{} (step {})", file(name), step);
}

SafeTensors RunFolder::load_checkpoint(const std::string& name) {
  const std::string path = file(name);
  SafeTensors st = load_safetensors(path);
  for (const auto& [tensor_name, t] : st.tensors)
    if (!all_finite(t))
      throw std::runtime_error("checkpoint '" + path + "': tensor '" + tensor_name +
                               "' holds NaN or Inf; it cannot be resumed from");
  if (name == "last.safetensors") last_good_ = fmt::format("{} (step {})", path, metadata_int(st, "step", path));
  return st;
}

std::string RunFolder::last_good() const { return last_good_.empty() ? "none (no checkpoint was written yet)" : last_good_; }

// ---- checkpoint metadata ------------------------------------------------------------------

namespace {

const std::string& metadata_value(const SafeTensors& st, const std::string& key, const std::string& file) {
  const auto it = st.metadata.find(key);
  if (it == st.metadata.end())
    throw std::runtime_error("checkpoint '" + file + "': metadata '" + key + "' is missing (not a checkpoint written by wedge train?)");
  return it->second;
}

[[noreturn]] void bad_metadata(const std::string& file, const std::string& key, const std::string& value,
                               const std::string& expected) {
  throw std::runtime_error("checkpoint '" + file + "': metadata '" + key + "' is " + nlohmann::json(value).dump() +
                           ", expected " + expected);
}

}  // namespace

std::int64_t metadata_int(const SafeTensors& st, const std::string& key, const std::string& file, std::int64_t min_value) {
  const std::string& s = metadata_value(st, key, file);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < min_value)
    bad_metadata(file, key, s, fmt::format("an integer >= {}", min_value));
  return v;
}

std::uint64_t metadata_uint(const SafeTensors& st, const std::string& key, const std::string& file) {
  const std::string& s = metadata_value(st, key, file);
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) bad_metadata(file, key, s, "a non-negative integer");
  return v;
}

double metadata_double(const SafeTensors& st, const std::string& key, const std::string& file) {
  const std::string& s = metadata_value(st, key, file);
  // "inf" is a legitimate value (no validation yet: the best perplexity is infinite).
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isnan(v)) bad_metadata(file, key, s, "a number");
  return v;
}

}  // namespace wedge::tools
