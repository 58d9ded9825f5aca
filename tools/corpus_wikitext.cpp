// WikiText-2 and the user's own text for the training tools: the data room tokenizes each
// split (through its cache) with a WordPiece tokenizer; prompts and samples go through the
// same one.
#include <cmath>
#include <fstream>
#include <sstream>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "data/tokenizer.h"
#include "data/wikitext.h"
#include "tools/corpus.h"

namespace wedge::tools {

namespace {

// A split's ids, its notes (bytes that are not UTF-8, a damaged cache rebuilt) passed on to
// the corpus for the user to read.
std::vector<std::int32_t> take_ids(data::TokenStream stream, Corpus& corpus) {
  corpus.notes.insert(corpus.notes.end(), stream.notes.begin(), stream.notes.end());
  return std::move(stream.ids);
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (in) bytes << in.rdbuf();
  if (!in || in.bad()) throw std::runtime_error("cannot read the vocabulary " + path);
  return bytes.str();
}

}  // namespace

// Text in and out through the WordPiece tokenizer; its special tokens and the vocabulary's
// [unused*] placeholders are never sampled.
TextCodec wordpiece_codec(const std::string& vocab_file) {
  auto tok = std::make_shared<data::Tokenizer>(data::Tokenizer::from_file(vocab_file));
  TextCodec c;
  c.tokenizer = tok;
  c.kind = "wordpiece";
  c.vocab_size = tok->vocab().size();
  c.vocab_text = read_whole_file(vocab_file);
  c.encode = [tok](const std::string& text) { return tok->encode(text); };
  c.decode = [tok](const std::vector<std::int32_t>& ids) { return tok->decode(ids); };
  const data::Vocab& vocab = tok->vocab();
  for (std::int32_t id = 0; id < vocab.size(); ++id)
    if (tok->is_special(id) || vocab.token(id).rfind("[unused", 0) == 0) c.never_sampled.push_back(id);
  return c;
}

Corpus wikitext2_corpus(const CorpusSpec& spec) {
  if (spec.data_dir.empty())
    throw std::runtime_error("--data wikitext2 needs --data-dir DIR (the folder with wiki.train.raw or wiki.train.tokens)");
  const std::string vocab = spec.vocab.empty() ? data::find_vocab_near(spec.data_dir).string() : spec.vocab;
  Corpus c;
  c.name = "wikitext2";
  c.codec = wordpiece_codec(vocab);
  c.vocab_size = c.codec.vocab_size;
  const data::Tokenizer& tok = *c.codec.tokenizer;
  if (spec.wants("train")) c.train = take_ids(data::load_wikitext_split(spec.data_dir, data::WikiTextSplit::kTrain, tok), c);
  if (spec.wants("valid")) c.valid = take_ids(data::load_wikitext_split(spec.data_dir, data::WikiTextSplit::kValid, tok), c);
  if (spec.wants("test")) c.test = take_ids(data::load_wikitext_split(spec.data_dir, data::WikiTextSplit::kTest, tok), c);
  return c;
}

Corpus text_corpus(const CorpusSpec& spec) {
  if (spec.train_file.empty())
    throw std::runtime_error("--data text needs --train FILE (UTF-8 text; --valid FILE and --test FILE are optional)");
  if (spec.vocab.empty())
    throw std::runtime_error("--data text needs --vocab FILE: a WordPiece vocab.txt (the BERT-uncased one, or one "
                             "learnt from your text with `wedge vocab train`)");
  Corpus c;
  c.name = "text";
  c.codec = wordpiece_codec(spec.vocab);
  c.vocab_size = c.codec.vocab_size;
  const data::Tokenizer& tok = *c.codec.tokenizer;
  // The training file is read when it is trained on, and whenever the validation split is
  // carved from it.
  const bool carve = spec.valid_file.empty();
  if (spec.wants("train") || (carve && spec.wants("valid"))) c.train = take_ids(data::load_text_file(spec.train_file, tok), c);
  if (!carve) {
    if (spec.wants("valid")) c.valid = take_ids(data::load_text_file(spec.valid_file, tok), c);
  } else if (spec.wants("train") || spec.wants("valid")) {
    const auto n = static_cast<std::int64_t>(c.train.size());
    const auto carved = static_cast<std::int64_t>(std::ceil(kCarvedValidFraction * double(n)));
    if (n - carved < 2 || carved < 2)
      throw std::runtime_error(fmt::format("{}: {} tokens are too few to carve a validation split from; give --valid FILE",
                                           spec.train_file, n));
    c.valid.assign(c.train.end() - carved, c.train.end());
    c.train.resize(static_cast<std::size_t>(n - carved));
    c.notes.push_back(fmt::format("validation: the last {:.0f} % of {} ({} tokens), as no --valid FILE was given",
                                  100 * kCarvedValidFraction, spec.train_file, carved));
  }
  if (!spec.test_file.empty() && spec.wants("test")) c.test = take_ids(data::load_text_file(spec.test_file, tok), c);
  return c;
}

}  // namespace wedge::tools
