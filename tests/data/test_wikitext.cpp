// WikiText-2 loading (both releases, <unk>, artifacts), the token cache (hit, stale,
// corrupt) and language-model batching (coverage, shuffling), on files the tests write;
// then line and token counts on the real dataset when it is present.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/hash.h"
#include "data/wikitext.h"
#include "scratch.h"

using namespace wedge::data;
using wedge::testing::ScratchDir;
using wedge::testing::write_file;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<std::int32_t>;

const fs::path kSharedData = WEDGE_SHARED_DATA;


Tokenizer toy_tokenizer() {
  return Tokenizer(Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",  // 0-4
                                       "the", "cat", "sat", "on", "mat",                // 5-9
                                       "=", "@", "-", ",", ".",                          // 10-14
                                       "1", "000", "title", "##s"}));                   // 15-18
}

// Heading, empty lines, and the @-@ / @,@ artifacts of the release.
const std::string kRaw = " = Title = \n \n The cat sat on the mat @-@ mats , 1 @,@ 000 cats . \n";
const Ids kRawIds = {10, 17, 10, 5, 6, 7, 8, 5, 9, 11, 12, 11, 9, 18, 13, 15, 11, 13, 11, 16, 6, 18, 14};

WikiTextOptions no_cache() {
  WikiTextOptions o;
  o.cache_dir.clear();
  return o;
}

}  // namespace

TEST_CASE("the raw release is tokenized as one text, artifacts kept by default") {
  ScratchDir dir("raw");
  write_file(dir.path / "wiki.train.raw", kRaw);
  const Tokenizer t = toy_tokenizer();
  const TokenStream s = load_wikitext_split(dir.path, WikiTextSplit::kTrain, t, no_cache());
  CHECK(s.ids == kRawIds);
  CHECK(s.ids == t.encode(kRaw));
  CHECK(s.lines == 3);
  CHECK(s.bytes == kRaw.size());
  CHECK(s.release == WikiTextRelease::kRaw);
  CHECK(s.unk_count == 0);
  CHECK(s.cache == CacheStatus::kDisabled);

  WikiTextOptions detok = no_cache();
  detok.detokenize_artifacts = true;
  const TokenStream d = load_wikitext_split(dir.path, WikiTextSplit::kTrain, t, detok);
  CHECK(std::count(d.ids.begin(), d.ids.end(), 11) == 0);  // no "@" left
  CHECK(d.ids.size() == kRawIds.size() - 4);              // mat - mats , 1 , 000: two @ pairs gone
}

TEST_CASE("the tokenized release maps <unk> to [UNK]") {
  ScratchDir dir("tokens");
  write_file(dir.path / "wiki.valid.tokens", " The <unk> sat on <unk> . \n<unk>\n");
  const Tokenizer t = toy_tokenizer();
  const TokenStream s = load_wikitext_split(dir.path, WikiTextSplit::kValid, t, no_cache());
  CHECK(s.ids == Ids{5, 1, 7, 8, 1, 14, 1});
  CHECK(s.unk_count == 3);
  CHECK(s.release == WikiTextRelease::kTokens);
}

TEST_CASE("finding the files: raw preferred, sub-folders searched, absent splits are clear errors") {
  ScratchDir dir("find");
  write_file(dir.path / "wikitext-2" / "wiki.test.tokens", "the cat\n");
  write_file(dir.path / "wikitext-2-raw" / "wiki.test.raw", "the mat\n");
  write_file(dir.path / "wikitext-2" / "wiki.train.tokens", "the\n");
  auto test_file = find_wikitext_file(dir.path, WikiTextSplit::kTest);
  REQUIRE(test_file);
  CHECK(test_file->release == WikiTextRelease::kRaw);
  CHECK(find_wikitext_file(dir.path, WikiTextSplit::kTest, WikiTextRelease::kTokens)->path.filename() ==
        "wiki.test.tokens");
  CHECK(find_wikitext_file(dir.path, WikiTextSplit::kTrain)->release == WikiTextRelease::kTokens);
  CHECK_FALSE(find_wikitext_file(dir.path, WikiTextSplit::kValid));

  const Tokenizer t = toy_tokenizer();
  CHECK_THROWS_WITH_AS(load_wikitext_split(dir.path, WikiTextSplit::kValid, t, no_cache()),
                       doctest::Contains("wiki.valid"), std::runtime_error);
  CHECK_THROWS_WITH_AS(load_wikitext_split(dir.path / "nope", WikiTextSplit::kTrain, t, no_cache()),
                       doctest::Contains("download_data.sh"), std::runtime_error);
  CHECK(parse_wikitext_split("valid") == WikiTextSplit::kValid);
  CHECK_THROWS_AS(parse_wikitext_split("dev2"), std::invalid_argument);
}

TEST_CASE("empty files load; bytes that are not UTF-8 make their word [UNK] and are counted") {
  ScratchDir dir("odd");
  write_file(dir.path / "wiki.train.raw", "");
  write_file(dir.path / "wiki.valid.raw", "the cat\n\nthe \xff\xfe" "cat sat\non the m\xe2\x82t\n");
  const Tokenizer t = toy_tokenizer();
  const TokenStream empty = load_wikitext_split(dir.path, WikiTextSplit::kTrain, t, no_cache());
  CHECK(empty.ids.empty());
  CHECK(empty.lines == 0);
  CHECK(empty.ill_formed_utf8 == 0);
  CHECK(empty.notes.empty());
  // \xff and \xfe are two ill-formed sequences, \xe2\x82 (a cut-short euro sign) one; each
  // damaged word is one [UNK], not what is left of it ("cat", "mt")
  const TokenStream s = load_wikitext_split(dir.path, WikiTextSplit::kValid, t, no_cache());
  CHECK(s.ids == Ids{5, 6, 5, 1, 7, 8, 5, 1});
  CHECK(s.unk_count == 2);
  CHECK(s.ill_formed_utf8 == 3);
  CHECK(s.first_ill_formed_line == 3);
  REQUIRE(s.notes.size() == 1);
  CHECK(s.notes[0].find("wiki.valid.raw: 3 byte sequences that are not UTF-8 (the first on line 3) read as U+FFFD") !=
        std::string::npos);

  // the user's own text files say the same
  write_file(dir.path / "mine.txt", "the cat\nsat on the m\xe9t\n");
  TextFileOptions text_options;
  text_options.cache_dir.clear();
  const TokenStream mine = load_text_file(dir.path / "mine.txt", t, text_options);
  CHECK(mine.ids == Ids{5, 6, 7, 8, 5, 1});
  CHECK(mine.ill_formed_utf8 == 1);
  REQUIRE(mine.notes.size() == 1);
  CHECK(mine.notes[0].find("mine.txt: 1 byte sequence that is not UTF-8 (the first on line 2)") != std::string::npos);
}

TEST_CASE("a cache whose checksum holds but whose ids the vocabulary lacks is rebuilt, with a note") {
  ScratchDir dir("cache-ids");
  const fs::path data = dir.path / "data";
  write_file(data / "wiki.train.raw", kRaw);
  WikiTextOptions options;
  options.cache_dir = dir.path / "cache";
  const Tokenizer t = toy_tokenizer();  // 19 tokens
  REQUIRE(load_wikitext_split(data, WikiTextSplit::kTrain, t, options).cache == CacheStatus::kMissing);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(options.cache_dir)) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  const fs::path cache_file = files[0];

  // Id 3 of the payload becomes 40000 (or -7), and the checksum at offset 48 is made to match,
  // as a file written by a faulty tool (or by hand) would be.
  for (const std::int32_t bad : {40000, -7, 19}) {
    CAPTURE(bad);
    Ids ids = kRawIds;
    ids[3] = bad;
    const std::uint64_t checksum = Fnv1a64().add(ids.data(), ids.size() * sizeof(std::int32_t)).value();
    {
      std::fstream f(cache_file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(48);
      f.write(reinterpret_cast<const char*>(&checksum), sizeof checksum);
      f.seekp(56 + 3 * 4);
      f.write(reinterpret_cast<const char*>(&bad), sizeof bad);
    }
    std::vector<std::int32_t> raw;
    std::string problem;
    // the file itself is intact: only the vocabulary's size tells it is wrong
    const TokenCacheKey key = [&] {
      std::ifstream in(cache_file, std::ios::binary);
      std::uint64_t h[3];
      in.seekg(16);
      in.read(reinterpret_cast<char*>(h), sizeof h);
      return TokenCacheKey{h[0], h[1], h[2]};
    }();
    CHECK(read_token_cache(cache_file, key, raw) == CacheStatus::kHit);
    CHECK(raw == ids);
    CHECK(read_token_cache(cache_file, key, raw, t.vocab().size(), &problem) == CacheStatus::kCorrupt);
    CHECK(raw.empty());
    CHECK(problem == fmt::format("id {} at position 3 is outside the vocabulary's 19 ids", bad));

    const TokenStream s = load_wikitext_split(data, WikiTextSplit::kTrain, t, options);
    CHECK(s.cache == CacheStatus::kCorrupt);
    CHECK(s.ids == kRawIds);
    REQUIRE(s.notes.size() == 1);
    CHECK(s.notes[0] == fmt::format("token cache {} was damaged (id {} at position 3 is outside the vocabulary's 19 "
                                    "ids); {} is tokenized again and the cache rewritten",
                                    cache_file.string(), bad, (data / "wiki.train.raw").string()));
    const TokenStream again = load_wikitext_split(data, WikiTextSplit::kTrain, t, options);
    CHECK(again.cache == CacheStatus::kHit);
    CHECK(again.ids == kRawIds);
    CHECK(again.notes.empty());
  }
}

TEST_CASE("the token cache: second load is a hit; stale and corrupt files are rebuilt") {
  ScratchDir dir("cache");
  const fs::path data = dir.path / "data";
  write_file(data / "wiki.train.raw", kRaw);
  WikiTextOptions options;
  options.cache_dir = dir.path / "cache";
  const Tokenizer t = toy_tokenizer();

  const TokenStream first = load_wikitext_split(data, WikiTextSplit::kTrain, t, options);
  CHECK(first.cache == CacheStatus::kMissing);
  CHECK(first.cache_note.empty());
  const TokenStream second = load_wikitext_split(data, WikiTextSplit::kTrain, t, options);
  CHECK(second.cache == CacheStatus::kHit);
  CHECK(second.ids == first.ids);

  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(options.cache_dir)) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  const fs::path cache_file = files[0];

  // another option is another key
  WikiTextOptions detok = options;
  detok.detokenize_artifacts = true;
  CHECK(load_wikitext_split(data, WikiTextSplit::kTrain, t, detok).cache == CacheStatus::kStale);
  CHECK(load_wikitext_split(data, WikiTextSplit::kTrain, t, options).cache == CacheStatus::kStale);

  // the text changed
  write_file(data / "wiki.train.raw", "the cat\n");
  const TokenStream changed = load_wikitext_split(data, WikiTextSplit::kTrain, t, options);
  CHECK(changed.cache == CacheStatus::kStale);
  CHECK(changed.ids == Ids{5, 6});
  CHECK(load_wikitext_split(data, WikiTextSplit::kTrain, t, options).cache == CacheStatus::kHit);

  // one flipped payload byte
  {
    std::fstream f(cache_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(57);
    f.put('\x7f');
  }
  const TokenStream repaired = load_wikitext_split(data, WikiTextSplit::kTrain, t, options);
  CHECK(repaired.cache == CacheStatus::kCorrupt);
  CHECK(repaired.ids == Ids{5, 6});
  CHECK(load_wikitext_split(data, WikiTextSplit::kTrain, t, options).cache == CacheStatus::kHit);

  // cut short, and garbage
  fs::resize_file(cache_file, fs::file_size(cache_file) - 2);
  CHECK(load_wikitext_split(data, WikiTextSplit::kTrain, t, options).cache == CacheStatus::kCorrupt);
  write_file(cache_file, "not a cache file at all");
  CHECK(load_wikitext_split(data, WikiTextSplit::kTrain, t, options).cache == CacheStatus::kCorrupt);
  CHECK(load_wikitext_split(data, WikiTextSplit::kTrain, t, options).cache == CacheStatus::kHit);

  // the key is checked by the reader itself
  std::vector<std::int32_t> ids;
  const TokenCacheKey wrong{1, 2, 3};
  CHECK(read_token_cache(cache_file, wrong, ids) == CacheStatus::kStale);
  CHECK(ids.empty());
  CHECK(read_token_cache(dir.path / "absent.ids", wrong, ids) == CacheStatus::kMissing);
  write_token_cache(dir.path / "direct.ids", wrong, Ids{7, -1, 2147483647});
  CHECK(read_token_cache(dir.path / "direct.ids", wrong, ids) == CacheStatus::kHit);
  CHECK(ids == Ids{7, -1, 2147483647});
}

TEST_CASE("tokenizing on several threads gives the same stream") {
  std::string text;
  const std::string lines[] = {" = Title = \n", " \n", " The cat sat on the mat @-@ mats , 1 @,@ 000 cats . \n",
                               " <unk> on the <unk> \n"};
  for (int i = 0; text.size() < 3'000'000; ++i) text += lines[i % 4];
  const Tokenizer t = toy_tokenizer();
  for (const auto release : {WikiTextRelease::kRaw, WikiTextRelease::kTokens}) {
    const Ids one = tokenize_wikitext_text(text, release, t, false, 1);
    CHECK(tokenize_wikitext_text(text, release, t, false, 3) == one);
    CHECK(tokenize_wikitext_text(text, release, t, false, 0) == one);
  }
}

TEST_CASE("evaluation blocks predict every token but the first exactly once") {
  Ids stream(23);
  for (int i = 0; i < 23; ++i) stream[i] = 100 + i;
  const LmBatcher batcher(stream, 5, 2, /*pad_id=*/0);
  CHECK(batcher.predicted_tokens() == 22);
  CHECK(batcher.eval_blocks() == 5);  // 22 = 4 × 5 + 2
  CHECK(batcher.eval_batches() == 3);
  std::multiset<std::int32_t> targets;
  std::size_t predicted = 0;
  for (std::size_t b = 0; b < batcher.eval_batches(); ++b) {
    const LmBatch batch = batcher.eval_batch(b);
    predicted += batch.predicted_tokens;
    for (std::size_t r = 0; r < batch.rows; ++r) {
      for (std::size_t t = 0; t < batch.block; ++t) {
        const std::int32_t in = batch.inputs[r * batch.block + t], target = batch.targets[r * batch.block + t];
        if (t < batch.lengths[r]) {
          CHECK(target == in + 1);  // the next token of the stream
          targets.insert(target);
        } else {
          CHECK(in == 0);
          CHECK(target == kIgnoreTarget);
        }
      }
    }
  }
  CHECK(predicted == 22);
  CHECK(targets.size() == 22);
  CHECK(std::set<std::int32_t>(targets.begin(), targets.end()).size() == 22);
  CHECK(*targets.begin() == 101);
  CHECK(*targets.rbegin() == 122);
  const LmBatch last = batcher.eval_batch(2);
  CHECK(last.rows == 1);
  CHECK(last.lengths == std::vector<std::size_t>{2});
  CHECK(last.inputs == Ids{120, 121, 0, 0, 0});
  CHECK(last.targets == Ids{121, 122, kIgnoreTarget, kIgnoreTarget, kIgnoreTarget});
  CHECK_THROWS_AS(batcher.eval_batch(3), std::out_of_range);
}

TEST_CASE("training blocks: full blocks only, shuffled per epoch from the seed") {
  Ids stream(23);
  for (int i = 0; i < 23; ++i) stream[i] = i;
  const LmBatcher batcher(stream, 5, 3, 0);
  CHECK(batcher.train_blocks() == 4);  // the 2-token remainder is dropped
  CHECK(batcher.train_batches_per_epoch() == 2);
  const auto order = batcher.epoch_order(7, 0);
  CHECK(order == batcher.epoch_order(7, 0));
  std::vector<std::uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::uint32_t>{0, 1, 2, 3});
  std::set<std::size_t> seen;
  for (std::size_t b = 0; b < batcher.train_batches_per_epoch(); ++b) {
    const LmBatch batch = batcher.train_batch(order, b);
    CHECK(batch.rows == (b == 0 ? 3u : 1u));
    for (std::size_t r = 0; r < batch.rows; ++r) {
      const std::size_t block = batch.block_ids[r];
      seen.insert(block);
      CHECK(batch.lengths[r] == 5);
      for (std::size_t t = 0; t < 5; ++t) {
        CHECK(batch.inputs[r * 5 + t] == static_cast<std::int32_t>(block * 5 + t));
        CHECK(batch.targets[r * 5 + t] == static_cast<std::int32_t>(block * 5 + t + 1));
      }
    }
  }
  CHECK(seen.size() == 4);
  // different epochs (and seeds) give different orders; over 40 epochs the first block is
  // found in every position
  std::set<std::uint32_t> first_positions;
  for (std::uint64_t epoch = 0; epoch < 40; ++epoch) {
    const auto o = batcher.epoch_order(7, epoch);
    first_positions.insert(static_cast<std::uint32_t>(std::find(o.begin(), o.end(), 0u) - o.begin()));
  }
  CHECK(first_positions.size() == 4);
  CHECK(seeded_permutation(1000, 1, 0) != seeded_permutation(1000, 2, 0));
  CHECK(seeded_permutation(1000, 1, 0) != seeded_permutation(1000, 1, 1));
  CHECK(seeded_permutation(0, 1, 0).empty());
  CHECK_THROWS_AS(LmBatcher(stream, 0, 1, 0), std::invalid_argument);
}

TEST_CASE("real WikiText-2: line counts of both releases, token counts of bert-base-uncased") {
  const fs::path vocab = kSharedData / "bert-base-uncased-vocab.txt";
  if (!fs::exists(kSharedData / "wikitext-2-raw") || !fs::exists(kSharedData / "wikitext-2") || !fs::exists(vocab)) {
    MESSAGE("skipped: WikiText-2 or the BERT vocabulary not found under " << kSharedData.string());
    return;
  }
  const Tokenizer bert = Tokenizer::from_file(vocab);
  const WikiTextOptions options = no_cache();
  const std::pair<WikiTextSplit, std::size_t> lines[] = {
      {WikiTextSplit::kTrain, 36718}, {WikiTextSplit::kValid, 3760}, {WikiTextSplit::kTest, 4358}};
  for (const auto& [split, count] : lines) {
    const auto raw = find_wikitext_file(kSharedData, split, WikiTextRelease::kRaw);
    const auto tokens = find_wikitext_file(kSharedData, split, WikiTextRelease::kTokens);
    REQUIRE(raw);
    REQUIRE(tokens);
    std::ifstream in(raw->path, std::ios::binary);
    CHECK(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n') ==
          static_cast<std::ptrdiff_t>(count));
  }
  // the whole of wiki.train.raw as one text: 2,303,695 tokens with the reference
  const TokenStream train = load_wikitext_split(kSharedData, WikiTextSplit::kTrain, bert, options);
  CHECK(train.release == WikiTextRelease::kRaw);
  CHECK(train.lines == 36718);
  CHECK(train.ids.size() == 2303695);
  CHECK(train.unk_count == 429);

  // the tokenized release; equal to the reference run on the file with <unk> written as [UNK]
  WikiTextOptions tokens_release = options;
  tokens_release.release = WikiTextRelease::kTokens;
  const TokenStream valid = load_wikitext_split(kSharedData, WikiTextSplit::kValid, bert, tokens_release);
  CHECK(valid.lines == 3760);
  CHECK(valid.ids.size() == 225018);
  CHECK(valid.unk_count == 11718);  // 11,711 <unk> markers and 7 words outside the vocabulary
  const TokenStream test = load_wikitext_split(kSharedData, WikiTextSplit::kTest, bert, tokens_release);
  CHECK(test.lines == 4358);
}

TEST_CASE("a text file of one's own: tokenized as one text, cached by content, bad files named") {
  ScratchDir dir("textfile");
  const Tokenizer t = toy_tokenizer();
  write_file(dir.path / "mine.txt", "The cat sat\non the mat .\n\nthe cat");
  TextFileOptions options;
  options.cache_dir = dir.path / "cache";
  const TokenStream first = load_text_file(dir.path / "mine.txt", t, options);
  CHECK(first.ids == Ids{5, 6, 7, 8, 5, 9, 14, 5, 6});
  CHECK(first.ids == t.encode("The cat sat\non the mat .\n\nthe cat"));
  CHECK(first.lines == 4);
  CHECK(first.cache == CacheStatus::kMissing);
  CHECK(load_text_file(dir.path / "mine.txt", t, options).cache == CacheStatus::kHit);
  // Another file with the same text shares the entry; a changed text gets its own.
  write_file(dir.path / "copy.txt", "The cat sat\non the mat .\n\nthe cat");
  CHECK(load_text_file(dir.path / "copy.txt", t, options).cache == CacheStatus::kHit);
  write_file(dir.path / "mine.txt", "the mat");
  const TokenStream changed = load_text_file(dir.path / "mine.txt", t, options);
  CHECK(changed.cache == CacheStatus::kMissing);
  CHECK(changed.ids == Ids{5, 9});

  CHECK_THROWS_WITH_AS(load_text_file(dir.path / "absent.txt", t, options), doctest::Contains("absent.txt"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(load_text_file(dir.path / "absent.txt", t, options), doctest::Contains("text file not found"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(load_text_file(dir.path, t, options), doctest::Contains((dir.str() + " is a folder").c_str()),
                       std::runtime_error);
  write_file(dir.path / "blank.txt", " \n\n \t\n");
  CHECK_THROWS_WITH_AS(load_text_file(dir.path / "blank.txt", t, options), doctest::Contains("holds no tokens"),
                       std::runtime_error);
}
