// Shared by the trainer tests: fresh run directories, the per-step losses a run logged, and
// a small SNLI folder (commands are run with shell.h).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/lm.h"
#include "shell.h"

namespace wedge::testing {

inline std::string fresh_run_dir(const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() / ("wedge_run_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

// The "loss" of every step line of <run>/metrics.jsonl, in order.
inline std::vector<double> step_losses(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

// A small model of any kind with dropout on (so resumes must restore the RNG too).
inline models::LMConfig small_config(const std::string& kind, std::int64_t d_model, std::int64_t block) {
  models::LMConfig c;
  c.model = kind;
  c.layers = 2;
  c.d_model = d_model;
  c.d_ff = 2 * d_model;
  c.heads = 2;
  c.block = block;
  c.rank = 6;
  c.windows = {1, 2, 4};
  c.patch = 4;  // SheafState: 4 patches of 4 tokens in a block of 16
  c.cover_depth = 2;
  c.types = 2;
  c.state_size = 4;
  c.section_dim = 8;
  c.expert_d_ff = d_model;
  c.dropout = 0.1;
  c.seed = 3;
  return c;
}

// n SNLI pairs as JSON lines; pair i (counted from `offset`) has label i % 3, except every
// 7th, whose gold label is "-".
inline std::string jsonl(int n, int offset) {
  static const char* labels[] = {"entailment", "neutral", "contradiction"};
  static const char* words[] = {"a man sits", "a dog runs", "the cat sleeps", "a woman sings", "two kids play"};
  std::string out;
  for (int i = 0; i < n; ++i) {
    const int k = i + offset;
    nlohmann::json j = {{"gold_label", k % 7 == 6 ? "-" : labels[k % 3]},
                        {"sentence1", std::string(words[k % 5]) + " ."},
                        {"sentence2", std::string(words[(k / 3) % 5]) + " outside ."}};
    out += j.dump() + "\n";
  }
  return out;
}

struct Folder {
  std::filesystem::path dir, vocab;
};

// An SNLI folder of the reduced protocol's files and a vocabulary for them: dev 7,000
// pairs (6,000 labelled), test 70 (60), the 1 % sample 140 (120) in partial/.
inline Folder snli_folder(const std::string& name) {
  Folder f;
  f.dir = fresh_run_dir(name);
  std::filesystem::create_directories(f.dir / "partial");
  std::ofstream(f.dir / "snli_1.0_dev.jsonl") << jsonl(7000, 0);
  std::ofstream(f.dir / "snli_1.0_test.jsonl") << jsonl(70, 3);
  std::ofstream(f.dir / "partial" / "snli_1.0_train_random1pct.jsonl") << jsonl(140, 5);
  f.vocab = f.dir / "vocab.txt";
  std::ofstream(f.vocab) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nman\nsits\ndog\nruns\nthe\ncat\nsleeps\nwoman\nsings\ntwo\nkids\n"
                            "play\noutside\n.\n";
  return f;
}

}  // namespace wedge::testing
