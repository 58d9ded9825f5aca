// Continuing from a run, and what a run folder keeps so that a trained model needs nothing
// outside it. Two ways to go on training (tools/trainer.h has the loop):
//
//   --resume       the same run, continued exactly: every setting the run fixed (its data,
//                  checked by the sha256 of the token ids it trained on; the sizes; lr and
//                  schedule; batch and pieces; seed; precision) stays the run's, and a flag
//                  that names another value is refused, by name. Only the length may grow
//                  (--epochs, --max-steps); the schedule then stretches over the new length
//                  with the same warm-up. A finished run says so and trains nothing.
//   --init-from    a new run from another run's weights (its best or last checkpoint): a
//                  fresh optimizer and schedule, data of its own. The sizes are the parent's
//                  (a size flag that contradicts them is refused); the vocabulary must be
//                  the parent's, byte for byte. config.json records the parent and the sha256
//                  of the checkpoint it started from.
//
// Self-contained: a run folder holds its vocabulary as vocab.txt (config.json records its
// kind and sha256), so `generate` reads no corpus, and a run keeps working after its training
// text moves.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/module.h"
#include "models/lm.h"
#include "tools/corpus.h"

namespace wedge::tools {

// The flags given on the command line, by their long name ("--lr").
using GivenFlags = std::set<std::string>;

// The key of config.json a flag sets ("--d-model" -> "d_model", "--train" -> "train_file",
// "--no-mix-out-proj" -> "mix_out_proj").
std::string config_key_of_flag(const std::string& flag);

// For each flag in `given` (but not in `free`) whose key config.json's `section` of
// `recorded` holds ("model" or "train"): its value in `wanted` (the same shape, as the flags
// describe it) must equal the recorded one, else std::invalid_argument:
//   "<context>: --lr 0.01 differs from the run's 0.0005 (<file>: train.lr)<hint>".
void refuse_changed_flags(const GivenFlags& given, const std::set<std::string>& free, const nlohmann::json& wanted,
                          const nlohmann::json& recorded, const std::string& section, const std::string& file,
                          const std::string& context, const std::string& hint);

// The sha256 of token ids as little-endian int32 bytes: what config.json records of each
// split a run trained on ("data_sha256": {"train": ..., "valid": ...}).
std::string token_ids_sha256(const std::vector<std::int32_t>& ids);
nlohmann::json data_fingerprint(const Corpus& corpus);
// A resumed run's splits must be the ones it was trained on (a run recorded before
// fingerprints passes); the error names the split, the files and what to do instead.
void check_same_data(const nlohmann::json& recorded, const Corpus& corpus, const std::string& file,
                     const std::string& run_dir);
// The same for any task: `now` holds the sha256 of each split read now, `describe` says
// what a split is ("1,234 tokens of wikitext2").
void check_same_data(const nlohmann::json& recorded, const nlohmann::json& now,
                     const std::function<std::string(const std::string&)>& describe, const std::string& file,
                     const std::string& run_dir);

// The vocabulary file in a run folder, and what config.json records of it
// ({"tokenizer": "wordpiece" | "words", "vocab_sha256": ...}).
inline constexpr const char* kRunVocabFile = "vocab.txt";
nlohmann::json vocab_record(const TextCodec& codec);
// The codec of a trained run: its vocab.txt, checked against the recorded sha256. A run
// written before runs kept their vocabulary reads it from the recorded corpus instead.
TextCodec run_codec(const std::string& run_dir, const nlohmann::json& settings);

// The corpus a run was trained on, as config.json records it, read through the run's own
// vocab.txt (so `wedge eval` needs no --vocab of the user's after training).
CorpusSpec run_corpus_spec(const std::string& run_dir, const nlohmann::json& settings);

// --init-from RUN[:best|last] (best when no suffix; a best that was never written falls
// back to last, as `wedge eval` does): the parent run a fine-tune starts from.
struct ParentRun {
  std::string arg;  // as given
  std::string flag = "--init-from";  // the flag that named it, for messages (--backbone too)
  std::string dir;
  std::string checkpoint = "best";
  nlohmann::json config;  // its config.json

  // Reads the parent (its config.json and checkpoint must be there, and it must be a run of
  // `task`: "lm" or "nli"): std::invalid_argument naming what is wrong.
  static ParentRun open(const std::string& arg, const std::string& task = "lm", const std::string& flag = "--init-from");
  // The parent of `arg` whose config.json another process read.
  static ParentRun from(const std::string& arg, nlohmann::json config, const std::string& flag = "--init-from");

  std::string file() const;  // the checkpoint's path
  // The fine-tune's model configuration (config.json's "model"): the parent's sizes (a size
  // flag given that differs from them is refused), with the regularisation flags
  // (--dropout, --energy-weight, --balance-weight) as given. `flags`: the configuration the
  // flags describe, as JSON.
  nlohmann::json model_config(const nlohmann::json& flags, const GivenFlags& given) const;
  // The fine-tune must read text with the parent's vocabulary, byte for byte (`what` names
  // the data, for the message).
  void check_vocabulary(const TextCodec& codec, const std::string& what) const;
  // Loads the checkpoint into `model`; returns what config.json records of the parent:
  // {"run", "checkpoint", "file", "step", "sha256"}.
  nlohmann::json load_weights(Module& model) const;
};

}  // namespace wedge::tools
