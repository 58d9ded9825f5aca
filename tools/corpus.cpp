#include "tools/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>
#include <stdexcept>

#include <fmt/format.h>
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

const std::vector<data::DependencyProbe>& Corpus::probes(const std::string& which) const {
  split(which);  // the same error for an unknown split
  return which == "valid" ? valid_probes : which == "test" ? test_probes : train_probes;
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
  s.block = json_field(settings, "block", s.block);
  return s;
}

TextCodec words_codec(std::vector<std::string> list) {
  auto words = std::make_shared<data::SyntheticCorpus>();
  words->vocab = std::move(list);
  TextCodec c;
  c.kind = "words";
  c.vocab_size = static_cast<std::int64_t>(words->vocab.size());
  for (const std::string& w : words->vocab) c.vocab_text += w + "\n";
  c.encode = [words](const std::string& text) { return data::synthetic_encode(*words, text); };
  c.decode = [words](const std::vector<std::int32_t>& ids) { return data::synthetic_decode(*words, ids); };
  return c;
}

TextCodec read_codec(const std::string& kind, const std::string& vocab_file) {
  if (kind == "wordpiece") return wordpiece_codec(vocab_file);
  if (kind != "words") throw std::runtime_error(fmt::format("{}: unknown tokenizer kind '{}' (expected wordpiece or words)", vocab_file, kind));
  std::ifstream in(vocab_file);
  if (!in) throw std::runtime_error("cannot read the vocabulary " + vocab_file);
  std::vector<std::string> words;
  for (std::string line; std::getline(in, line);) words.push_back(line);
  if (words.empty()) throw std::runtime_error(vocab_file + ": the vocabulary is empty");
  return words_codec(std::move(words));
}

namespace {

std::size_t count_type(const std::vector<data::DependencyProbe>& probes, data::DependencyType type) {
  return static_cast<std::size_t>(
      std::count_if(probes.begin(), probes.end(), [type](const data::DependencyProbe& p) { return p.type == type; }));
}

// A generated corpus: its words are whitespace-separated vocabulary entries, as the
// built-in synthetic corpus's are.
Corpus word_corpus(std::string name, data::SyntheticCorpus generated) {
  Corpus out;
  out.name = std::move(name);
  out.codec = words_codec(std::move(generated.vocab));
  out.vocab_size = out.codec.vocab_size;
  out.train = std::move(generated.train);
  out.valid = std::move(generated.valid);
  out.test = std::move(generated.test);
  return out;
}

}  // namespace

Corpus depsim_corpus(const CorpusSpec& spec) {
  data::DependencyProbeSettings settings;
  settings.length = spec.block;
  settings.seed = spec.seed;
  data::DependencyProbeCorpus c = data::make_dependency_probe_corpus(settings);
  Corpus out = word_corpus("depsim", {std::move(c.vocab), std::move(c.train), std::move(c.valid), std::move(c.test)});
  out.train_probes = std::move(c.train_probes);
  out.valid_probes = std::move(c.valid_probes);
  out.test_probes = std::move(c.test_probes);
  out.notes.push_back(fmt::format("dependency probe: documents of {} tokens; {} local, {} anchor and {} entity probes in "
                                  "the validation split",
                                  settings.length, count_type(out.valid_probes, data::DependencyType::kLocal),
                                  count_type(out.valid_probes, data::DependencyType::kAnchor),
                                  count_type(out.valid_probes, data::DependencyType::kEntity)));
  return out;
}

Corpus load_corpus(const CorpusSpec& spec) {
  if (spec.data.empty() || spec.data == "synthetic") return word_corpus("synthetic", data::make_synthetic_corpus(spec.seed));
  if (spec.data == "wikitext2") return wikitext2_corpus(spec);
  if (spec.data == "text") return text_corpus(spec);
  if (spec.data == "depsim") return depsim_corpus(spec);
  throw std::runtime_error("unknown --data '" + spec.data +
                           "' (expected wikitext2, text or depsim, or omit it for the synthetic corpus)");
}

}  // namespace wedge::tools
