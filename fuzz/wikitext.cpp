// WikiText-2 and one's own text files: the first byte picks the release (raw or tokenized),
// whether the " @-@ " artifacts are glued back, and the block and batch of the language-model
// batcher; the rest is the file's text. It goes through tokenize_wikitext_text (exactly what
// load_wikitext_split does with a split's text), through load_text_file from a scratch file
// (`--data text`, cache off), and the stream is cut into training and evaluation batches.
// Expected outcome for bad input: only load_text_file's std::runtime_error for a text with
// no tokens, naming the file. Checked: ids inside the vocabulary, the raw release equal to
// encoding the text as one string, evaluation batches predicting every token but the first
// exactly once, training batches of full blocks only.
#include <stdexcept>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "data/wikitext.h"
#include "fuzz_support.h"
#include "fuzz_tokenizer.h"

using namespace wedge;
using namespace wedge::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const Tokenizer tokenizer = fuzz::small_tokenizer();
  static const fuzz::ScratchFile input("wiki.train.raw");
  const std::uint8_t flags = data[0];
  const WikiTextRelease release = (flags & 1) ? WikiTextRelease::kTokens : WikiTextRelease::kRaw;
  const bool detokenize = (flags & 2) != 0;
  const std::string_view text = fuzz::as_text(data + 1, size - 1);

  const std::vector<std::int32_t> ids = tokenize_wikitext_text(text, release, tokenizer, detokenize, 1);
  FUZZ_CHECK(fuzz::ids_in_vocab(ids, tokenizer));
  if (release == WikiTextRelease::kRaw && !detokenize) FUZZ_CHECK(ids == tokenizer.encode(text));

  try {
    const TokenStream stream = load_text_file(input.write(text), tokenizer, TextFileOptions{.cache_dir = {}, .threads = 1});
    FUZZ_CHECK(release != WikiTextRelease::kRaw || detokenize || stream.ids == ids);
    FUZZ_CHECK(stream.bytes == text.size() && stream.cache == CacheStatus::kDisabled);
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(tokenizer.encode(text).empty());
    FUZZ_CHECK(std::string(e.what()).find(input.path().string()) != std::string::npos);
  }

  const std::size_t block = 1 + (flags >> 2) % 8, batch_size = 1 + (flags >> 5);
  const LmBatcher batcher(ids, block, batch_size, tokenizer.vocab().pad_id());
  std::size_t predicted = 0;
  for (std::size_t b = 0; b < batcher.eval_batches(); ++b) {
    const LmBatch batch = batcher.eval_batch(b);
    FUZZ_CHECK(batch.inputs.size() == batch.rows * block && batch.targets.size() == batch.inputs.size());
    for (std::size_t r = 0; r < batch.rows; ++r) {
      const std::size_t start = batch.block_ids[r] * block;
      for (std::size_t t = 0; t < block; ++t) {
        const bool real = t < batch.lengths[r];
        FUZZ_CHECK(batch.targets[r * block + t] == (real ? ids[start + t + 1] : kIgnoreTarget));
      }
    }
    predicted += batch.predicted_tokens;
  }
  FUZZ_CHECK(predicted == batcher.predicted_tokens());
  const std::vector<std::uint32_t> order = batcher.epoch_order(flags, 0);
  for (std::size_t b = 0; b < batcher.train_batches_per_epoch(); ++b) {
    const LmBatch batch = batcher.train_batch(order, b);
    for (const std::size_t length : batch.lengths) FUZZ_CHECK(length == block);
  }
  return 0;
}
