#include "tools/corpus.h"

#include <memory>
#include <stdexcept>

#include "data/synthetic.h"

namespace wedge::tools {

const std::vector<std::int32_t>& Corpus::split(const std::string& which) const {
  if (which == "train") return train;
  if (which == "valid") return valid;
  if (which == "test") return test;
  throw std::runtime_error("unknown split '" + which + "' (expected train, valid or test)");
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
  throw std::runtime_error("unknown --data '" + spec.data + "' (expected wikitext2, or omit it for the synthetic corpus)");
}

}  // namespace wedge::tools
