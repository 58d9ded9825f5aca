#include "tools/corpus.h"

#include <filesystem>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/synthetic.h"
#include "engine/json_field.h"

namespace wedge::tools {

const std::vector<std::int32_t>& Corpus::split(const std::string& which) const {
  const std::vector<std::int32_t>* ids = which == "train"   ? &train
                                         : which == "valid" ? &valid
                                         : which == "test"  ? &test
                                                            : nullptr;
  if (ids == nullptr) throw std::runtime_error("unknown split '" + which + "' (expected train, valid or test)");
  if (ids->empty() && name == "text" && which == "test")
    throw std::runtime_error("this run has no test split: it was trained with --data text without --test FILE");
  return *ids;
}

void CorpusSpec::write_to(nlohmann::json& settings) const {
  auto absolute = [](const std::string& path) {
    return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
  };
  settings["data"] = data.empty() ? "synthetic" : data;
  settings["data_dir"] = absolute(data_dir);
  settings["vocab"] = absolute(vocab);
  if (data == "text") {
    settings["train_file"] = absolute(train_file);
    settings["valid_file"] = absolute(valid_file);
    settings["test_file"] = absolute(test_file);
  }
}

CorpusSpec CorpusSpec::read_from(const nlohmann::json& settings) {
  CorpusSpec s;
  s.data = json_field(settings, "data", std::string());
  if (s.data == "synthetic") s.data.clear();
  s.data_dir = json_field(settings, "data_dir", std::string());
  s.vocab = json_field(settings, "vocab", std::string());
  s.train_file = json_field(settings, "train_file", std::string());
  s.valid_file = json_field(settings, "valid_file", std::string());
  s.test_file = json_field(settings, "test_file", std::string());
  s.seed = json_field(settings, "seed", std::uint64_t{0});
  return s;
}

namespace {

Corpus synthetic_corpus(std::uint64_t seed) {
  auto c = std::make_shared<data::SyntheticCorpus>(data::make_synthetic_corpus(seed));
  Corpus out;
  out.name = "synthetic";
  out.vocab_size = static_cast<std::int64_t>(c->vocab.size());
  out.train = c->train;
  out.valid = c->valid;
  out.test = c->test;
  out.encode = [c](const std::string& text) { return data::synthetic_encode(*c, text); };
  out.decode = [c](const std::vector<std::int32_t>& ids) { return data::synthetic_decode(*c, ids); };
  return out;
}

}  // namespace

Corpus load_corpus(const CorpusSpec& spec) {
  if (spec.data.empty() || spec.data == "synthetic") return synthetic_corpus(spec.seed);
  if (spec.data == "wikitext2") return wikitext2_corpus(spec);
  if (spec.data == "text") return text_corpus(spec);
  throw std::runtime_error("unknown --data '" + spec.data +
                           "' (expected wikitext2 or text, or omit it for the synthetic corpus)");
}

}  // namespace wedge::tools
