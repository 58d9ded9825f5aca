// A training run's folder as one object: it owns the folder while a training writes to it
// (a lock file; a second writer fails at once), writes config.json, appends metrics.jsonl,
// saves and loads checkpoints with their metadata, and on a resume puts the metrics back to
// the checkpoint's step. Every rule about what may be written to a run folder lives here:
//
//   - a fresh training never replaces another run (unless told to with --overwrite);
//   - every file is written through a temporary file unique to the process and renamed
//     into place; checkpoints and config.json are fsync'ed first; a failed write stops the
//     run with a message and leaves the previous file as it was;
//   - metrics.jsonl only ever holds whole lines, each step once, also after a resume;
//   - a checkpoint is written only from finite values, so the last one is always good.
//
// Layout (tools/trainer.h describes the contents):
//   config.json  vocab.txt  metrics.jsonl  last.safetensors  best.safetensors  .lock
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/safetensors.h"
#include "engine/tensor.h"

namespace wedge::tools {

class RunFolder {
 public:
  // A new run in `dir` (created when absent), locked. A folder that already holds a run is
  // refused, with `continue_hint` saying how to continue it, unless `overwrite`; the old
  // run's files stay until begin() (so a new run that fails to start destroys nothing).
  static RunFolder create(const std::string& dir, bool overwrite, const std::string& continue_hint);
  // The run in `dir`, to continue it: config.json must be there.
  static RunFolder resume(const std::string& dir);

  RunFolder(RunFolder&&) noexcept;
  RunFolder& operator=(RunFolder&&) noexcept;
  ~RunFolder();  // releases the lock (and removes a folder create() made for a run that never began)

  const std::string& dir() const { return dir_; }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  std::string config_path() const { return file("config.json"); }
  std::string metrics_path() const { return file("metrics.jsonl"); }

  nlohmann::json read_config() const;
  void write_config(const nlohmann::json& config);

  // A fresh run begins: an overwritten run's files go, vocab.txt (when given) and
  // config.json are written, metrics.jsonl starts empty.
  void begin(const nlohmann::json& config, std::string_view vocab_text = {});
  // A resumed run keeps the metrics lines up to `step` (a torn last line and the steps
  // logged after the checkpoint are dropped), so each step is logged once.
  void resume_metrics(std::int64_t step);
  // One JSON line, flushed; a failed write (a full disk) throws naming the file.
  void append_metrics(const nlohmann::json& line);

  // Saves `name` (e.g. "last.safetensors"). A tensor holding NaN or Inf is refused: the
  // previous checkpoint stays and the error names it (last_good()). `step` is recorded.
  void save_checkpoint(const std::string& name, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata, std::int64_t step);
  // Loads a checkpoint; a non-finite tensor is refused with a message naming it.
  SafeTensors load_checkpoint(const std::string& name);
  // The checkpoint a diverged run can go back to, in words: "runs/x/last.safetensors
  // (step 400)" or "none (no checkpoint was written yet)".
  std::string last_good() const;

 private:
  RunFolder() = default;
  void lock();
  void release();
  void open_metrics();

  std::string dir_;
  int lock_fd_ = -1;
  bool replace_ = false;  // create() with overwrite over an existing run
  // create() made the folder and begin() has not run: a run that fails to start removes it
  // again, so a refused `wedge train` leaves nothing behind.
  bool remove_unbegun_ = false;
  std::unique_ptr<std::ofstream> metrics_;
  std::string last_good_;
};

// Checkpoint metadata, checked: a missing key or a value that is not what it should be is
// an error naming the file and the key ("error: stoll" otherwise).
std::int64_t metadata_int(const SafeTensors& st, const std::string& key, const std::string& file,
                          std::int64_t min_value = 0);
std::uint64_t metadata_uint(const SafeTensors& st, const std::string& key, const std::string& file);
double metadata_double(const SafeTensors& st, const std::string& key, const std::string& file);

}  // namespace wedge::tools
