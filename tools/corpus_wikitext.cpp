// WikiText-2 for the training tools: the data room tokenizes each split (through its
// cache) with the BERT WordPiece tokenizer; prompts and samples go through the same one.
#include <memory>
#include <stdexcept>

#include "data/tokenizer.h"
#include "data/wikitext.h"
#include "tools/corpus.h"

namespace wedge::tools {

Corpus wikitext2_corpus(const CorpusSpec& spec) {
  if (spec.data_dir.empty())
    throw std::runtime_error("--data wikitext2 needs --data-dir DIR (the folder with wiki.train.raw or wiki.train.tokens)");
  const std::filesystem::path vocab = spec.vocab.empty() ? data::find_vocab_near(spec.data_dir) : std::filesystem::path(spec.vocab);
  auto tok = std::make_shared<data::Tokenizer>(data::Tokenizer::from_file(vocab));
  Corpus c;
  c.name = "wikitext2";
  c.vocab_size = tok->vocab().size();
  if (spec.load_train) c.train = data::load_wikitext_split(spec.data_dir, data::WikiTextSplit::kTrain, *tok).ids;
  c.valid = data::load_wikitext_split(spec.data_dir, data::WikiTextSplit::kValid, *tok).ids;
  c.test = data::load_wikitext_split(spec.data_dir, data::WikiTextSplit::kTest, *tok).ids;
  c.encode = [tok](const std::string& text) { return tok->encode(text); };
  c.decode = [tok](const std::vector<std::int32_t>& ids) { return tok->decode(ids); };
  return c;
}

}  // namespace wedge::tools
