// SNLI 1.0: sentence pairs labelled entailment / neutral / contradiction (0 / 1 / 2).
//
// Reads the original snli_1.0_{train,dev,test}.jsonl (fields gold_label, sentence1,
// sentence2) or the tab-separated snli_1.0_*.txt (columns found by their header names).
// Rows whose gold_label is "-" (the annotators did not agree) are dropped and counted.
// A malformed row, an unknown label or a row that is not valid UTF-8 (the published files
// are UTF-8, so such a file is damaged) is an error naming file:line.
//
// Each sentence is encoded as [CLS] sentence [SEP], cut to at most max_length tokens
// (default 48, as in the Grassmann paper's SNLI set-up). Batches come in two forms at once:
// the two sentences as separate padded matrices, and the pair as one sequence
// [CLS] premise [SEP] hypothesis [SEP] with segment ids, built from the same cut sentences
// (so at most 2·max_length − 1 tokens).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace wedge::data {

enum class NliLabel : std::int32_t { kEntailment = 0, kNeutral = 1, kContradiction = 2 };
inline constexpr std::array<const char*, 3> kNliLabelNames = {"entailment", "neutral", "contradiction"};

struct SnliExample {
  std::string premise;     // sentence1
  std::string hypothesis;  // sentence2
  std::int32_t label;      // NliLabel as an integer
  std::size_t line;        // line in the file, for messages
};

enum class SnliFormat { kJsonl, kTsv };

struct SnliFile {
  std::string name;  // the path, for messages
  std::vector<SnliExample> examples;
  std::size_t rows = 0;        // data rows read (header excluded)
  std::size_t unlabelled = 0;  // rows with gold_label "-", dropped
  std::array<std::size_t, 3> label_counts{};
};

// Parses SNLI rows from a stream; `name` is used in error messages ("name:line: ...").
// Throws std::runtime_error on a malformed row, an unknown label or an input with no rows.
SnliFile parse_snli(std::istream& in, const std::string& name, SnliFormat format);

// Reads a file; the format comes from the extension (.jsonl, else tab-separated).
SnliFile read_snli_file(const std::filesystem::path& path);

// The file of a split ("train", "dev", "test"): snli_1.0_<split>.jsonl, else .txt, in `dir`
// or in its snli_1.0/ or snli/ folder. nullopt when absent.
std::optional<std::filesystem::path> find_snli_file(const std::filesystem::path& dir, const std::string& split);

// The same, but an absent split is an error naming the file expected and how to get it.
SnliFile load_snli_split(const std::filesystem::path& dir, const std::string& split);

struct SnliOptions {
  std::size_t max_length = 48;  // per sentence, [CLS] and [SEP] included
  unsigned threads = 0;         // for tokenizing; 0 = all cores
};

struct SnliEncoded {
  std::vector<std::int32_t> premise;     // [CLS] ... [SEP]
  std::vector<std::int32_t> hypothesis;  // [CLS] ... [SEP]
  std::int32_t label;
  bool truncated;  // either sentence was cut
};

// Padded batch; every matrix is rows × width, row-major; masks are 1 on real tokens.
struct SnliBatch {
  std::size_t rows = 0;
  std::vector<std::int32_t> labels;

  std::size_t premise_width = 0, hypothesis_width = 0;
  std::vector<std::int32_t> premise_ids, hypothesis_ids;
  std::vector<std::uint8_t> premise_mask, hypothesis_mask;
  std::vector<std::int32_t> premise_lengths, hypothesis_lengths;

  std::size_t pair_width = 0;
  std::vector<std::int32_t> pair_ids, pair_type_ids;  // type ids: 0 premise part, 1 hypothesis part
  std::vector<std::uint8_t> pair_mask;
  std::vector<std::int32_t> pair_lengths;
};

class SnliDataset {
 public:
  // Tokenizes every example. The vocabulary needs [CLS] and [SEP]; padding uses [PAD]
  // (id 0 when the vocabulary has none).
  SnliDataset(const SnliFile& file, const Tokenizer& tokenizer, SnliOptions options = {});

  std::size_t size() const { return examples_.size(); }
  const SnliEncoded& operator[](std::size_t i) const { return examples_[i]; }
  std::size_t truncated_count() const;

  // Permutation of the examples for one epoch, from (seed, epoch) only.
  std::vector<std::uint32_t> epoch_order(std::uint64_t seed, std::uint64_t epoch) const;
  std::size_t batches(std::size_t batch_size) const { return (size() + batch_size - 1) / batch_size; }
  // Batch `index` of an order (the last may be smaller); in file order when `order` is empty.
  SnliBatch batch(std::span<const std::uint32_t> order, std::size_t index, std::size_t batch_size) const;
  SnliBatch make_batch(std::span<const std::uint32_t> example_ids) const;

 private:
  std::vector<SnliEncoded> examples_;
  std::int32_t pad_id_ = 0, cls_id_ = -1, sep_id_ = -1;
};

}  // namespace wedge::data
