#include "data/wikitext.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "data/dataset_errors.h"
#include "data/hash.h"
#include "data/splitmix.h"
#include "data/unicode.h"

namespace wedge::data {

namespace {

// Bump when a change to this file changes the ids produced for the same text, so that old
// cache files are seen as stale.
constexpr std::uint64_t kRecipeVersion = 1;

std::string read_whole_file(const std::filesystem::path& path, const std::string& missing_message) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(missing_message);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw std::runtime_error(fmt::format("{}: read error", display_path(path)));
  return std::move(buffer).str();
}

std::size_t count_lines(std::string_view text) {
  const auto newlines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  return newlines + (!text.empty() && text.back() != '\n' ? 1 : 0);
}

// One piece of text (no line is split between pieces) tokenized the WikiText way.
void tokenize_piece(std::string_view text, WikiTextRelease release, const Tokenizer& tokenizer,
                    bool detokenize_artifacts, std::vector<std::int32_t>& ids) {
  std::string cleaned;
  if (detokenize_artifacts) {
    cleaned.assign(text);
    for (const char* artifact : {"@-@", "@,@", "@.@"}) {
      std::size_t pos = 0;
      while ((pos = cleaned.find(artifact, pos)) != std::string::npos) {
        cleaned.replace(pos, 3, 1, artifact[1]);
        ++pos;
      }
    }
    text = cleaned;
  }
  if (release != WikiTextRelease::kTokens) {
    tokenizer.encode_append(text, ids);
    return;
  }
  static constexpr std::string_view kUnkMarker = "<unk>";
  std::size_t done = 0, pos;
  while ((pos = text.find(kUnkMarker, done)) != std::string_view::npos) {
    tokenizer.encode_append(text.substr(done, pos - done), ids);
    ids.push_back(tokenizer.vocab().unk_id());
    done = pos + kUnkMarker.size();
  }
  tokenizer.encode_append(text.substr(done), ids);
}

std::uint64_t options_hash(const Tokenizer& tokenizer, WikiTextRelease release, bool detokenize_artifacts) {
  const TokenizerOptions& t = tokenizer.options();
  const NormalizerOptions& n = t.normalizer;
  Fnv1a64 h;
  h.add_u64(kRecipeVersion)
      .add_u64(static_cast<std::uint64_t>(release))
      .add_u64(detokenize_artifacts)
      .add_u64(n.clean_text)
      .add_u64(n.handle_chinese_chars)
      .add_u64(n.lowercase)
      .add_u64(n.strip_accents.value_or(n.lowercase))
      .add_u64(t.max_input_chars_per_word)
      .add_u64(t.match_special_tokens);
  return h.value();
}

}  // namespace

std::string ill_formed_utf8_note(const std::string& source, std::size_t count, std::size_t first_line) {
  return fmt::format("{}: {} byte sequence{} that {} not UTF-8 (the first on line {}) read as U+FFFD, which makes "
                     "{} word [UNK] (is the file in another encoding, such as Latin-1?)",
                     source, count, count == 1 ? "" : "s", count == 1 ? "is" : "are", first_line,
                     count == 1 ? "its" : "each one's");
}

const char* to_string(WikiTextSplit split) {
  switch (split) {
    case WikiTextSplit::kTrain: return "train";
    case WikiTextSplit::kValid: return "valid";
    case WikiTextSplit::kTest: return "test";
  }
  return "?";
}

const char* to_string(WikiTextRelease release) {
  switch (release) {
    case WikiTextRelease::kAuto: return "auto";
    case WikiTextRelease::kRaw: return "raw";
    case WikiTextRelease::kTokens: return "tokens";
  }
  return "?";
}

WikiTextSplit parse_wikitext_split(const std::string& name) {
  if (name == "train") return WikiTextSplit::kTrain;
  if (name == "valid" || name == "validation" || name == "dev") return WikiTextSplit::kValid;
  if (name == "test") return WikiTextSplit::kTest;
  throw std::invalid_argument(fmt::format("unknown WikiText-2 split '{}' (train, valid or test)", name));
}

std::optional<WikiTextFile> find_wikitext_file(const std::filesystem::path& dir, WikiTextSplit split,
                                               WikiTextRelease release) {
  const std::string stem = fmt::format("wiki.{}.", to_string(split));
  std::vector<WikiTextRelease> releases;
  if (release != WikiTextRelease::kTokens) releases.push_back(WikiTextRelease::kRaw);
  if (release != WikiTextRelease::kRaw) releases.push_back(WikiTextRelease::kTokens);
  for (const WikiTextRelease r : releases) {
    const std::string name = stem + (r == WikiTextRelease::kRaw ? "raw" : "tokens");
    for (const auto& folder : {dir, dir / "wikitext-2-raw", dir / "wikitext-2"}) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(folder / name, ec)) return WikiTextFile{folder / name, r};
    }
  }
  return std::nullopt;
}

std::vector<std::int32_t> tokenize_wikitext_text(std::string_view text, WikiTextRelease release,
                                                 const Tokenizer& tokenizer, bool detokenize_artifacts,
                                                 unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  // Cut at line breaks into one piece per thread; a line break is whitespace, so the pieces'
  // ids concatenated are the ids of the whole text.
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, 1 + text.size() / (1 << 20)));
  std::vector<std::size_t> cuts{0};
  for (unsigned t = 1; t < threads; ++t) {
    std::size_t at = text.size() * t / threads;
    at = text.find('\n', std::max(at, cuts.back()));
    cuts.push_back(at == std::string_view::npos ? text.size() : at + 1);
  }
  cuts.push_back(text.size());
  std::vector<std::vector<std::int32_t>> parts(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    auto work = [&, t] {
      tokenize_piece(text.substr(cuts[t], cuts[t + 1] - cuts[t]), release, tokenizer, detokenize_artifacts, parts[t]);
    };
    if (threads == 1) work();
    else pool.emplace_back(work);
  }
  for (auto& th : pool) th.join();
  std::vector<std::int32_t> ids = std::move(parts[0]);
  for (unsigned t = 1; t < threads; ++t) ids.insert(ids.end(), parts[t].begin(), parts[t].end());
  return ids;
}

namespace {

// A file's text tokenized the `release` way, through the cache file `cache_name` in
// `cache_dir` (none when empty).
TokenStream tokenize_file_cached(const std::filesystem::path& path, const std::string& missing_message,
                                 WikiTextRelease release, bool detokenize_artifacts, const Tokenizer& tokenizer,
                                 const std::filesystem::path& cache_dir,
                                 const std::function<std::string(const TokenCacheKey&)>& cache_name, unsigned threads) {
  TokenStream stream;
  stream.source = path;
  stream.release = release;
  const std::string text = read_whole_file(path, missing_message);
  stream.bytes = text.size();
  stream.lines = count_lines(text);
  if (const unicode::IllFormedUtf8 bad = unicode::find_ill_formed_utf8(text); bad.count > 0) {
    stream.ill_formed_utf8 = bad.count;
    stream.first_ill_formed_line =
        1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad.first_offset), '\n'));
    stream.notes.push_back(ill_formed_utf8_note(display_path(path), bad.count, stream.first_ill_formed_line));
  }

  const TokenCacheKey key{Fnv1a64().add(text.data(), text.size()).value(), tokenizer.vocab().content_hash(),
                          options_hash(tokenizer, release, detokenize_artifacts)};
  std::filesystem::path cache_file;
  if (!cache_dir.empty()) {
    cache_file = cache_dir / cache_name(key);
    std::string problem;
    stream.cache = read_token_cache(cache_file, key, stream.ids, tokenizer.vocab().size(), &problem);
    if (stream.cache == CacheStatus::kCorrupt)
      stream.notes.push_back(fmt::format("token cache {} was damaged ({}); {} is tokenized again and the cache rewritten",
                                         display_path(cache_file), problem, display_path(path)));
  }
  if (stream.cache != CacheStatus::kHit) {
    stream.ids = tokenize_wikitext_text(text, release, tokenizer, detokenize_artifacts, threads);
    if (!cache_file.empty()) {
      try {
        write_token_cache(cache_file, key, stream.ids);
      } catch (const std::exception& e) {
        stream.cache_note = e.what();  // caching is an optimisation: go on without it
      }
    }
  }
  const std::int32_t unk = tokenizer.vocab().unk_id();
  stream.unk_count = static_cast<std::size_t>(std::count(stream.ids.begin(), stream.ids.end(), unk));
  return stream;
}

}  // namespace

TokenStream load_wikitext_split(const std::filesystem::path& dir, WikiTextSplit split, const Tokenizer& tokenizer,
                                const WikiTextOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error(fmt::format("WikiText-2 folder not found: {}. {}", display_path(dir), how_to_get("WikiText-2")));
  const auto file = find_wikitext_file(dir, split, options.release);
  if (!file) {
    const std::string expected = options.release == WikiTextRelease::kTokens ? "tokens"
                                 : options.release == WikiTextRelease::kRaw   ? "raw"
                                                                              : "raw or .tokens";
    throw std::runtime_error(fmt::format("WikiText-2 {} split not found: no wiki.{}.{} in {} (nor in its "
                                         "wikitext-2-raw/ or wikitext-2/ folder). {}",
                                         to_string(split), to_string(split), expected, display_path(dir),
                                         how_to_get("WikiText-2")));
  }
  return tokenize_file_cached(
      file->path, missing_file_message(file->path, "WikiText-2"), file->release, options.detokenize_artifacts, tokenizer,
      options.cache_dir,
      [&](const TokenCacheKey& key) {
        return fmt::format("wikitext2-{}-{}-{:016x}.ids", to_string(split), to_string(file->release), key.vocab_hash);
      },
      options.threads);
}

TokenStream load_text_file(const std::filesystem::path& file, const Tokenizer& tokenizer, const TextFileOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw std::runtime_error(std::filesystem::is_directory(file, ec)
                                 ? fmt::format("text file {} is a folder", display_path(file))
                                 : fmt::format("text file not found: {}", display_path(file)));
  TokenStream stream = tokenize_file_cached(
      file, fmt::format("cannot open text file {}", display_path(file)), WikiTextRelease::kRaw, false, tokenizer,
      options.cache_dir,
      [](const TokenCacheKey& key) { return fmt::format("text-{:016x}-{:016x}.ids", key.text_hash, key.vocab_hash); },
      options.threads);
  if (stream.ids.empty())
    throw std::runtime_error(fmt::format("{}: holds no tokens ({} bytes of text)", display_path(file), stream.bytes));
  return stream;
}

// ---- batching ----------------------------------------------------------------------------

std::vector<std::uint32_t> seeded_permutation(std::size_t n, std::uint64_t seed, std::uint64_t stream) {
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  SplitMix64 rng{seed ^ (0xD1B54A32D192ED03ull * (stream + 1))};
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

LmBatcher::LmBatcher(std::vector<std::int32_t> stream, std::size_t block, std::size_t batch_size, std::int32_t pad_id)
    : stream_(std::move(stream)), block_(block), batch_size_(batch_size), pad_id_(pad_id) {
  if (block_ == 0) throw std::invalid_argument("LmBatcher: the block length must be at least 1");
  if (batch_size_ == 0) throw std::invalid_argument("LmBatcher: the batch size must be at least 1");
}

std::size_t LmBatcher::train_blocks() const { return predicted_tokens() / block_; }

std::size_t LmBatcher::train_batches_per_epoch() const { return (train_blocks() + batch_size_ - 1) / batch_size_; }

std::vector<std::uint32_t> LmBatcher::epoch_order(std::uint64_t seed, std::uint64_t epoch) const {
  return seeded_permutation(train_blocks(), seed, epoch);
}

LmBatch LmBatcher::train_batch(std::span<const std::uint32_t> order, std::size_t batch_index) const {
  const std::size_t begin = batch_index * batch_size_;
  if (begin >= order.size())
    throw std::out_of_range(fmt::format("training batch {} is past the end of the epoch ({} batches)", batch_index,
                                        (order.size() + batch_size_ - 1) / batch_size_));
  const std::size_t end = std::min(order.size(), begin + batch_size_);
  std::vector<std::size_t> blocks(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                  order.begin() + static_cast<std::ptrdiff_t>(end));
  for (const std::size_t b : blocks)
    if (b >= train_blocks()) throw std::out_of_range(fmt::format("block {} is not a full training block", b));
  return make_batch(blocks);
}

std::size_t LmBatcher::eval_blocks() const { return (predicted_tokens() + block_ - 1) / block_; }

std::size_t LmBatcher::eval_batches() const { return (eval_blocks() + batch_size_ - 1) / batch_size_; }

LmBatch LmBatcher::eval_batch(std::size_t batch_index) const {
  const std::size_t begin = batch_index * batch_size_;
  if (begin >= eval_blocks())
    throw std::out_of_range(fmt::format("evaluation batch {} is past the end ({} batches)", batch_index, eval_batches()));
  const std::size_t end = std::min(eval_blocks(), begin + batch_size_);
  std::vector<std::size_t> blocks;
  for (std::size_t b = begin; b < end; ++b) blocks.push_back(b);
  return make_batch(blocks);
}

LmBatch LmBatcher::make_batch(std::span<const std::size_t> block_ids) const {
  LmBatch batch;
  batch.rows = block_ids.size();
  batch.block = block_;
  batch.inputs.assign(batch.rows * block_, pad_id_);
  batch.targets.assign(batch.rows * block_, kIgnoreTarget);
  batch.block_ids.assign(block_ids.begin(), block_ids.end());
  const std::size_t n = predicted_tokens();
  for (std::size_t r = 0; r < batch.rows; ++r) {
    const std::size_t start = block_ids[r] * block_;
    const std::size_t length = std::min(block_, n - start);
    std::copy_n(stream_.begin() + static_cast<std::ptrdiff_t>(start), length,
                batch.inputs.begin() + static_cast<std::ptrdiff_t>(r * block_));
    std::copy_n(stream_.begin() + static_cast<std::ptrdiff_t>(start + 1), length,
                batch.targets.begin() + static_cast<std::ptrdiff_t>(r * block_));
    batch.lengths.push_back(length);
    batch.predicted_tokens += length;
  }
  return batch;
}

}  // namespace wedge::data
