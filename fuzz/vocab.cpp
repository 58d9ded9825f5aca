// Vocabulary files: the bytes of a vocab.txt into Vocab::load (`--vocab FILE`, and the BERT
// vocabulary found beside a dataset), then a tokenizer built on it. Expected outcome for bad
// input: std::runtime_error (a file that is empty or not UTF-8, naming file:line; a
// vocabulary without [UNK], which no tokenizer can use). A vocabulary that loads keeps its
// promises: one token a line, no trailing whitespace, the later id for a repeated token,
// save + load gives the same tokens, and the tokenizer's ids stay inside it.
#include <stdexcept>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "data/unicode.h"
#include "data/vocab.h"
#include "fuzz_support.h"
#include "fuzz_tokenizer.h"

using namespace wedge;
using namespace wedge::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz::ScratchFile input("vocab.txt");
  static const fuzz::ScratchFile copy("copy-vocab.txt");
  Vocab vocab;
  try {
    vocab = Vocab::load(input.write(fuzz::as_text(data, size)));
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(std::string(e.what()).find(input.path().string()) != std::string::npos);
    return 0;
  }
  FUZZ_CHECK(vocab.size() >= 1);
  for (std::int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& t = vocab.token(id);
    FUZZ_CHECK(unicode::is_valid_utf8(t));
    FUZZ_CHECK(t.find('\n') == std::string::npos);
    const std::int32_t found = vocab.find(t);
    FUZZ_CHECK(found >= id && vocab.token(found) == t);
  }

  try {
    vocab.save(copy.path());
    FUZZ_CHECK(Vocab::load(copy.path()).tokens() == vocab.tokens());
  } catch (const std::runtime_error& e) {  // a token with a line break ('\r') cannot be written
    FUZZ_CHECK(std::string(e.what()).find("line break") != std::string::npos);
  }

  if (vocab.unk_id() < 0) {
    bool refused = false;
    try {
      Tokenizer{vocab};
    } catch (const std::runtime_error&) {
      refused = true;
    }
    FUZZ_CHECK(refused);
    return 0;
  }
  const Tokenizer tokenizer(vocab);
  // The vocabulary's own tokens as text: every piece length, every prefix of every token.
  std::string text;
  for (std::int32_t id = 0; id < vocab.size() && id < 256; ++id) text += vocab.token(id) + (id % 3 ? "" : " ");
  const std::vector<std::int32_t> ids = tokenizer.encode(text);
  FUZZ_CHECK(fuzz::ids_in_vocab(ids, tokenizer));
  (void)tokenizer.decode(ids);
  if (vocab.cls_id() >= 0 && vocab.sep_id() >= 0) {
    const Encoding pair = tokenizer.encode_pair(text, "A man plays a guitar.", 8);
    FUZZ_CHECK(pair.ids.size() <= 8 && pair.ids.size() == pair.type_ids.size());
  }
  return 0;
}
