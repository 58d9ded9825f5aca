// WikiText-2 (or any text file) as one stream of token ids per split, and the
// language-model batches cut from it.
//
// Files: the raw release (wiki.{train,valid,test}.raw) or the tokenized release
// (wiki.{train,valid,test}.tokens). The raw release is preferred when both are there: the
// tokenized one replaces every word outside its 33k-word vocabulary by "<unk>", which a
// subword tokenizer does not need. In the tokenized release "<unk>" becomes [UNK] (plain BERT
// would cut it into "<", "un", "##k", ">").
//
// The text is tokenized as it is, so the stream equals encoding the whole file as one text:
//  - Line breaks are whitespace, and empty lines produce nothing; no separator token is
//    added between lines or articles (the " = Title = " heading lines mark articles anyway).
//  - The " @-@ ", " @,@ ", " @.@ " artifacts of both releases (the original tokenizer's
//    splitting of hyphens, thousands separators and decimal points, as in "1 @,@ 000") are
//    kept by default, so the stream and its perplexity compare with other work that runs the
//    BERT tokenizer over the same files (bert-base-uncased gives 2,303,695 tokens for
//    wiki.train.raw). `detokenize_artifacts` turns them back into "-", "," and "." glued to
//    their neighbours instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/token_cache.h"
#include "data/tokenizer.h"

namespace wedge::data {

enum class WikiTextSplit { kTrain, kValid, kTest };
enum class WikiTextRelease { kAuto, kRaw, kTokens };

const char* to_string(WikiTextSplit split);
const char* to_string(WikiTextRelease release);
WikiTextSplit parse_wikitext_split(const std::string& name);  // "train" | "valid" | "test"

struct WikiTextOptions {
  WikiTextRelease release = WikiTextRelease::kAuto;
  bool detokenize_artifacts = false;
  std::filesystem::path cache_dir = default_cache_dir();  // empty: no cache
  unsigned threads = 0;                                    // for tokenizing; 0 = all cores
};

// The file of a split: looks in `dir`, then in dir/wikitext-2-raw and dir/wikitext-2, for the
// raw file first (unless the release is fixed). nullopt when there is none.
struct WikiTextFile {
  std::filesystem::path path;
  WikiTextRelease release;  // kRaw or kTokens
};
std::optional<WikiTextFile> find_wikitext_file(const std::filesystem::path& dir, WikiTextSplit split,
                                               WikiTextRelease release = WikiTextRelease::kAuto);

struct TokenStream {
  std::vector<std::int32_t> ids;
  std::filesystem::path source;
  WikiTextRelease release = WikiTextRelease::kRaw;
  std::size_t lines = 0;
  std::size_t bytes = 0;
  std::size_t unk_count = 0;  // [UNK] ids in the stream
  // Byte sequences of the file that are not UTF-8 (each read as U+FFFD, which makes its
  // word [UNK]; see basic_tokenizer.h) and the line of the first.
  std::size_t ill_formed_utf8 = 0;
  std::size_t first_ill_formed_line = 0;
  CacheStatus cache = CacheStatus::kDisabled;
  std::string cache_note;     // why the cache could not be written, if it could not
  // One line each, for the user: bytes that are not UTF-8, a damaged cache file rebuilt.
  std::vector<std::string> notes;
};

// The note for `count` ill-formed UTF-8 sequences in `source` (a file as messages show it),
// the first on `first_line`; the same words wherever wedge reads text.
std::string ill_formed_utf8_note(const std::string& source, std::size_t count, std::size_t first_line);

// Tokenizes one split (or reads it from the cache). Throws std::runtime_error naming the
// path, and how to get the data, when the split's file is absent.
TokenStream load_wikitext_split(const std::filesystem::path& dir, WikiTextSplit split, const Tokenizer& tokenizer,
                                const WikiTextOptions& options = {});

// Tokenizes WikiText text (either release) exactly as load_wikitext_split does.
std::vector<std::int32_t> tokenize_wikitext_text(std::string_view text, WikiTextRelease release,
                                                 const Tokenizer& tokenizer, bool detokenize_artifacts,
                                                 unsigned threads = 1);

// ---- any text file ----------------------------------------------------------------------

// A UTF-8 text file of the user's for the language models, tokenized as it is — the way of
// the raw release: line breaks are whitespace, nothing is added between lines — through the
// same cache (keyed by the text, so every distinct file has its own cache entry).
struct TextFileOptions {
  std::filesystem::path cache_dir = default_cache_dir();  // empty: no cache
  unsigned threads = 0;                                    // for tokenizing; 0 = all cores
};

// Throws std::runtime_error naming the file when it is missing, unreadable or holds no tokens.
TokenStream load_text_file(const std::filesystem::path& file, const Tokenizer& tokenizer,
                           const TextFileOptions& options = {});

// ---- language-model batches -------------------------------------------------------------

// Targets at padded positions; a loss must skip them.
inline constexpr std::int32_t kIgnoreTarget = -1;

// rows × block token ids, row-major. targets[r][t] is the token after inputs[r][t].
struct LmBatch {
  std::size_t rows = 0;
  std::size_t block = 0;
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
  std::vector<std::size_t> lengths;  // real (unpadded) positions of each row
  std::size_t predicted_tokens = 0;  // sum of lengths
  std::vector<std::size_t> block_ids;  // which block of the stream each row is
};

// Cuts a stream into blocks of L+1 tokens that overlap by one: block k is
// stream[kL .. kL+L], its inputs the first L tokens, its targets the last L. Consecutive blocks
// share their boundary token, so every token but the first is a target exactly once.
//
// Training uses the full blocks only (the last, partial block is dropped) in an order
// shuffled per epoch from (seed, epoch); the last batch of an epoch may have fewer rows.
// Evaluation uses every block in stream order, the partial last one padded (inputs with
// pad_id, targets with kIgnoreTarget), so the N-1 predicted tokens of a stream of N are each
// scored exactly once and perplexity = exp(total NLL / predicted tokens). Each block starts
// without context from the previous one.
class LmBatcher {
 public:
  LmBatcher(std::vector<std::int32_t> stream, std::size_t block, std::size_t batch_size, std::int32_t pad_id);

  std::size_t block() const { return block_; }
  std::size_t batch_size() const { return batch_size_; }
  const std::vector<std::int32_t>& stream() const { return stream_; }

  std::size_t train_blocks() const;             // floor((N-1)/L)
  std::size_t train_batches_per_epoch() const;  // ceil(train_blocks / batch_size)
  // The block order of one epoch: a permutation of [0, train_blocks) that depends only on
  // (seed, epoch), the same on every platform.
  std::vector<std::uint32_t> epoch_order(std::uint64_t seed, std::uint64_t epoch) const;
  LmBatch train_batch(std::span<const std::uint32_t> order, std::size_t batch_index) const;

  std::size_t eval_blocks() const;   // ceil((N-1)/L)
  std::size_t eval_batches() const;  // ceil(eval_blocks / batch_size)
  LmBatch eval_batch(std::size_t batch_index) const;
  std::size_t predicted_tokens() const { return stream_.empty() ? 0 : stream_.size() - 1; }

 private:
  LmBatch make_batch(std::span<const std::size_t> block_ids) const;

  std::vector<std::int32_t> stream_;
  std::size_t block_;
  std::size_t batch_size_;
  std::int32_t pad_id_;
};

// A seeded Fisher-Yates permutation of [0, n) from a splitmix64 generator. (std::shuffle
// is not used because its results differ between standard libraries.)
std::vector<std::uint32_t> seeded_permutation(std::size_t n, std::uint64_t seed, std::uint64_t stream);

}  // namespace wedge::data
