// SNLI files: the first byte picks the format (JSONL or the tab-separated release) and the
// sentence length, the rest is the file's text, read by parse_snli (the stream reader
// behind read_snli_file and `wedge train --task nli`, `data stats`). Expected outcome for
// bad input: std::runtime_error naming "<name>:<line>" (or the name, for a file with no
// rows). A file that parses keeps its counts straight, and its pairs go through
// SnliDataset and make_batch as training does: every batch within its widths and masks.
#include <fmt/format.h>

#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/snli.h"
#include "fuzz_support.h"
#include "fuzz_tokenizer.h"

using namespace wedge;
using namespace wedge::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const SnliFormat format = (data[0] & 1) ? SnliFormat::kTsv : SnliFormat::kJsonl;
  const std::size_t max_length = 2 + (data[0] >> 1) % 16;
  std::istringstream in{std::string(fuzz::as_text(data + 1, size - 1))};
  static const std::string kName = "fuzz/snli_1.0_dev.jsonl";
  SnliFile file;
  try {
    file = parse_snli(in, kName, format);
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(std::string(e.what()).starts_with(kName + ":"));
    return 0;
  }
  FUZZ_CHECK(file.rows >= 1 && file.rows == file.examples.size() + file.unlabelled);
  FUZZ_CHECK(std::accumulate(file.label_counts.begin(), file.label_counts.end(), std::size_t{0}) ==
             file.examples.size());
  std::size_t previous_line = 0;
  for (const SnliExample& ex : file.examples) {
    FUZZ_CHECK(ex.label >= 0 && ex.label < 3);
    FUZZ_CHECK(ex.line > previous_line);
    previous_line = ex.line;
  }

  static const Tokenizer tokenizer = fuzz::small_tokenizer();
  const SnliDataset dataset(file, tokenizer, SnliOptions{.max_length = max_length, .threads = 1});
  FUZZ_CHECK(dataset.size() == file.examples.size());
  const std::size_t batch_size = 1 + data[0] % 3;
  const std::vector<std::uint32_t> order = dataset.epoch_order(data[0], 1);
  for (std::size_t b = 0; b < dataset.batches(batch_size) && b < 8; ++b) {
    const SnliBatch batch = dataset.batch(order, b, batch_size);
    FUZZ_CHECK(batch.premise_width <= max_length && batch.hypothesis_width <= max_length);
    FUZZ_CHECK(batch.pair_width <= 2 * max_length - 1);
    FUZZ_CHECK(batch.pair_ids.size() == batch.rows * batch.pair_width);
    FUZZ_CHECK(batch.pair_type_ids.size() == batch.pair_ids.size() && batch.pair_mask.size() == batch.pair_ids.size());
    for (std::size_t r = 0; r < batch.rows; ++r) {
      const auto length = static_cast<std::size_t>(batch.pair_lengths[r]);
      FUZZ_CHECK(length >= 3 && length <= batch.pair_width);
      FUZZ_CHECK(batch.pair_ids[r * batch.pair_width] == tokenizer.vocab().cls_id());
      FUZZ_CHECK(batch.pair_ids[r * batch.pair_width + length - 1] == tokenizer.vocab().sep_id());
      for (std::size_t t = 0; t < batch.pair_width; ++t) FUZZ_CHECK(batch.pair_mask[r * batch.pair_width + t] == (t < length));
    }
  }
  return 0;
}
