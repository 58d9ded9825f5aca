#include "data/synthetic.h"

#include <sstream>
#include <unordered_map>

#include "data/splitmix.h"

namespace wedge::data {

namespace {

// Picks by modulo (not SplitMix64::below), so a seed still gives the corpus it always gave.
struct Rng : SplitMix64 {
  std::size_t pick(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

const std::vector<std::string> kDet = {"the", "a"};
const std::vector<std::string> kAdj = {"small", "big", "red", "blue", "old", "quiet", "happy", "green"};
const std::vector<std::string> kNoun = {"cat", "dog", "bird", "child", "teacher", "ball", "book",
                                        "tree", "house", "river", "boat", "garden"};
const std::vector<std::string> kTransitive = {"sees", "finds", "likes", "carries", "follows", "paints"};
const std::vector<std::string> kIntransitive = {"sleeps", "runs", "sings", "waits"};
const std::vector<std::string> kPrep = {"near", "under", "behind"};
const std::vector<std::string> kOther = {".", "it"};

class Builder {
 public:
  explicit Builder(const SyntheticCorpus& c) {
    for (std::size_t i = 0; i < c.vocab.size(); ++i) id_[c.vocab[i]] = static_cast<std::int32_t>(i);
  }
  void word(std::vector<std::int32_t>& out, const std::string& w) { out.push_back(id_.at(w)); }

 private:
  std::unordered_map<std::string, std::int32_t> id_;
};

// Appends one noun phrase; returns its head noun.
std::string noun_phrase(Rng& rng, Builder& b, std::vector<std::int32_t>& out) {
  b.word(out, kDet[rng.pick(kDet.size())]);
  if (rng.coin(0.5)) b.word(out, kAdj[rng.pick(kAdj.size())]);
  const std::string noun = kNoun[rng.pick(kNoun.size())];
  b.word(out, noun);
  if (rng.coin(0.25)) {
    b.word(out, kPrep[rng.pick(kPrep.size())]);
    b.word(out, kDet[rng.pick(kDet.size())]);
    b.word(out, kNoun[rng.pick(kNoun.size())]);
  }
  return noun;
}

void generate(Rng& rng, Builder& b, std::size_t tokens, std::vector<std::int32_t>& out) {
  while (out.size() < tokens) {
    noun_phrase(rng, b, out);
    if (rng.coin(0.7)) {
      b.word(out, kTransitive[rng.pick(kTransitive.size())]);
      const std::string object = noun_phrase(rng, b, out);
      b.word(out, ".");
      if (rng.coin(0.5)) {  // the long-range copy
        b.word(out, "it");
        b.word(out, kTransitive[rng.pick(kTransitive.size())]);
        b.word(out, "the");
        b.word(out, object);
        b.word(out, ".");
      }
    } else {
      b.word(out, kIntransitive[rng.pick(kIntransitive.size())]);
      b.word(out, ".");
    }
  }
}

}  // namespace

SyntheticCorpus make_synthetic_corpus(std::uint64_t seed, std::size_t train_tokens, std::size_t eval_tokens) {
  SyntheticCorpus c;
  c.vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const auto* list : {&kDet, &kAdj, &kNoun, &kTransitive, &kIntransitive, &kPrep, &kOther})
    c.vocab.insert(c.vocab.end(), list->begin(), list->end());
  Builder b(c);
  Rng rng{seed * 0x2545F4914F6CDD1DULL + 1};
  generate(rng, b, train_tokens, c.train);
  generate(rng, b, eval_tokens, c.valid);
  generate(rng, b, eval_tokens, c.test);
  return c;
}

std::string synthetic_decode(const SyntheticCorpus& corpus, const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::int32_t id : ids) {
    if (!out.empty()) out += ' ';
    out += id >= 0 && static_cast<std::size_t>(id) < corpus.vocab.size() ? corpus.vocab[id] : "[UNK]";
  }
  return out;
}

std::vector<std::int32_t> synthetic_encode(const SyntheticCorpus& corpus, const std::string& text) {
  std::unordered_map<std::string, std::int32_t> id;
  for (std::size_t i = 0; i < corpus.vocab.size(); ++i) id[corpus.vocab[i]] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> out;
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    auto it = id.find(w);
    out.push_back(it == id.end() ? 1 : it->second);
  }
  return out;
}

}  // namespace wedge::data
