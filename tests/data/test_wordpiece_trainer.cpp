// The WordPiece trainer: hand-worked merges, then the incremental trainer against a naive
// one that recounts every pair from scratch before each merge, on random corpora.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "data/wordpiece_trainer.h"

using namespace wedge::data;

namespace {

using Tokens = std::vector<std::string>;

const Tokens kSpecials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

Tokens with_specials(const Tokens& rest) {
  Tokens out = kSpecials;
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

Vocab train(const std::string& text, std::size_t size, std::uint64_t min_pair_frequency = 1) {
  WordPieceTrainerOptions options;
  options.vocab_size = size;
  options.min_pair_frequency = min_pair_frequency;
  WordPieceTrainer trainer(options);
  trainer.add_text(text);
  return trainer.train();
}

std::string repeat_words(const std::vector<std::pair<std::string, int>>& words) {
  std::string text;
  for (const auto& [w, n] : words)
    for (int i = 0; i < n; ++i) text += w + " ";
  return text;
}

// The scheme written as plainly as possible: recount everything, pick the best pair, merge.
// Words here are ASCII, so one byte is one character.
Tokens naive_train(const std::map<std::string, std::uint64_t>& word_counts, std::size_t size,
                   std::uint64_t min_pair_frequency) {
  std::vector<std::pair<std::vector<std::string>, std::uint64_t>> words;
  std::map<std::string, bool> alphabet;
  for (const auto& [w, n] : word_counts) {
    std::vector<std::string> symbols;
    for (std::size_t i = 0; i < w.size(); ++i) symbols.push_back(i == 0 ? w.substr(0, 1) : "##" + w.substr(i, 1));
    for (const auto& s : symbols) alphabet[s] = true;
    words.emplace_back(symbols, n);
  }
  Tokens vocab = kSpecials;
  for (const auto& [s, unused] : alphabet) vocab.push_back(s);
  while (vocab.size() < size) {
    std::map<std::string, std::uint64_t> freq;
    std::map<std::pair<std::string, std::string>, std::uint64_t> pairs;
    for (const auto& [symbols, n] : words) {
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        freq[symbols[i]] += n;
        if (i + 1 < symbols.size()) pairs[{symbols[i], symbols[i + 1]}] += n;
      }
    }
    const std::pair<std::string, std::string>* best = nullptr;
    std::uint64_t best_count = 0;
    for (const auto& [pair, count] : pairs) {
      if (count < min_pair_frequency) continue;
      if (best) {
        // count / (fa fb) against best_count / (best fa fb), exactly; ties: larger count, then
        // the smaller pair in spelling order (which std::map order already gives first)
        const auto lhs = static_cast<unsigned __int128>(count) * freq[best->first] * freq[best->second];
        const auto rhs = static_cast<unsigned __int128>(best_count) * freq[pair.first] * freq[pair.second];
        if (lhs < rhs || (lhs == rhs && count <= best_count)) continue;
      }
      best = &pair;
      best_count = count;
    }
    if (!best) break;
    const auto [a, b] = *best;
    const std::string merged = a + b.substr(b.starts_with("##") ? 2 : 0);
    for (auto& [symbols, n] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(symbols[i]);
        }
      }
      symbols = out;
    }
    if (std::find(vocab.begin(), vocab.end(), merged) == vocab.end()) vocab.push_back(merged);
  }
  return vocab;
}

}  // namespace

TEST_CASE("the score prefers pairs whose parts are rare apart") {
  // ab ×4, cb ×4, dd ×1: freq a=4 c=4 ##b=8 d=1 ##d=1.
  // score(a,##b) = 4/(4·8) = 1/8, score(c,##b) = 1/8, score(d,##d) = 1/(1·1) = 1.
  // So the rarest pair merges first; then a ##b and c ##b tie on score and count, and the
  // spelling decides; after that c ##b scores 4/(4·4).
  const Vocab v = train(repeat_words({{"ab", 4}, {"cb", 4}, {"dd", 1}}), 20);
  CHECK(v.tokens() == with_specials({"##b", "##d", "a", "c", "d", "dd", "ab", "cb"}));
}

TEST_CASE("equal scores go to the more frequent pair") {
  // ab ×3, ac ×1: score(a,##b) = 3/(4·3) = 1/4 = score(a,##c) = 1/(4·1); ab is seen more.
  const Vocab v = train(repeat_words({{"ab", 3}, {"ac", 1}}), 9);
  CHECK(v.tokens() == with_specials({"##b", "##c", "a", "ab"}));
  const Vocab full = train(repeat_words({{"ab", 3}, {"ac", 1}}), 100);
  CHECK(full.tokens() == with_specials({"##b", "##c", "a", "ab", "ac"}));  // stops when no pair is left
}

TEST_CASE("the same piece reached by two merges enters the vocabulary once") {
  // xyz is reached as x + ##yz in one word and xy + ##z in another
  const Vocab v = train(repeat_words({{"xyz", 1}, {"yz", 1}, {"xy", 1}}), 100);
  const auto& t = v.tokens();
  CHECK(std::count(t.begin(), t.end(), "xyz") == 1);
}

TEST_CASE("the incremental trainer equals the naive one on random corpora") {
  std::mt19937_64 rng(1234);
  for (int round = 0; round < 12; ++round) {
    std::map<std::string, std::uint64_t> counts;
    std::string text;
    const int distinct = 5 + static_cast<int>(rng() % 60);
    const char* letters = round % 2 ? "abcde" : "abcdefghijklmnop";
    const std::size_t letter_count = std::char_traits<char>::length(letters);
    for (int w = 0; w < distinct; ++w) {
      std::string word;
      const int length = 1 + static_cast<int>(rng() % 7);
      for (int i = 0; i < length; ++i) word += letters[rng() % letter_count];
      const int n = 1 + static_cast<int>(rng() % 20);
      counts[word] += static_cast<std::uint64_t>(n);
      for (int i = 0; i < n; ++i) text += word + (i % 5 == 4 ? "\n" : " ");
    }
    const std::size_t size = 40 + rng() % 120;  // room for the whole alphabet (at most 32 symbols)
    const std::uint64_t min_pair = round % 3 == 2 ? 3 : 1;
    CAPTURE(round);
    CHECK(train(text, size, min_pair).tokens() == naive_train(counts, size, min_pair));
  }
}

TEST_CASE("training is deterministic and its vocabulary covers its corpus") {
  const std::string text =
      "The quick brown fox jumps over the lazy dog. Le cœur a ses raisons que la raison ne connaît point. "
      "Unaffable, unaffected; 1,234 items @ $5.99 each!";
  WordPieceTrainerOptions options;
  options.vocab_size = 120;
  WordPieceTrainer forward(options), backward(options);
  forward.add_text(text);
  forward.add_text("second line");
  backward.add_text("second line");
  backward.add_text(text);
  const Vocab v = forward.train();
  CHECK(v.tokens() == backward.train().tokens());  // word order does not matter
  CHECK(v.size() == 120);
  CHECK(v.tokens()[1] == "[UNK]");
  const Tokenizer t(v);
  const auto ids = t.encode(text);
  CHECK(std::count(ids.begin(), ids.end(), v.unk_id()) == 0);
  CHECK(t.decode(t.encode("the lazy dog")) == "the lazy dog");
}

TEST_CASE("an alphabet too big for the vocabulary keeps its most frequent characters") {
  // 5 specials + room for 3 symbols; a (×6), b (×5), c (×4) as word starts beat d, e (×1)
  const Vocab v = train("a a a a a a b b b b b c c c c d e", 8);
  CHECK(v.tokens() == with_specials({"a", "b", "c"}));
  CHECK_THROWS_AS(train("abc", 5), std::invalid_argument);  // no room beside the specials
}

TEST_CASE("training reads files and reports progress") {
  const auto dir = std::filesystem::temp_directory_path() / ("wedge-test-trainer-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "a.txt") << "hello world\nhello there\n";
  }
  WordPieceTrainerOptions options;
  options.vocab_size = 30;
  WordPieceTrainer trainer(options);
  trainer.add_file(dir / "a.txt");
  CHECK(trainer.total_words() == 4);
  CHECK(trainer.distinct_words() == 3);
  std::size_t calls = 0, last_size = 0;
  const Vocab v = trainer.train(
      [&](const WordPieceTrainerProgress& p) {
        ++calls;
        last_size = p.vocab_size;
      },
      2);
  CHECK(calls >= 2);
  CHECK(last_size == static_cast<std::size_t>(v.size()));
  CHECK_THROWS_AS(trainer.add_file(dir / "missing.txt"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("words with bytes that are not UTF-8 are counted and left out of training") {
  const auto dir = std::filesystem::temp_directory_path() / ("wedge-test-trainer-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  {
    // Latin-1 "café" and "naïve" in an otherwise UTF-8 file, on lines 2 and 3
    std::ofstream(dir / "mixed.txt", std::ios::binary) << "hello world\ncaf\xe9 hello\nna\xefve caf\xe9\n";
  }
  WordPieceTrainerOptions options;
  options.vocab_size = 40;
  WordPieceTrainer trainer(options);
  const TrainingTextReport report = trainer.add_file(dir / "mixed.txt");
  CHECK(report.lines == 3);
  CHECK(report.ill_formed_utf8 == 3);
  CHECK(report.first_ill_formed_line == 2);
  CHECK(trainer.total_words() == 6);
  CHECK(trainer.skipped_words() == 3);    // caf?, na?ve, caf?
  CHECK(trainer.distinct_words() == 2);   // hello, world
  const Vocab v = trainer.train();
  for (const std::string& t : v.tokens()) CHECK(t.find("\xef\xbf\xbd") == std::string::npos);
  CHECK_FALSE(v.contains("c"));  // "caf" was never learned from
  std::filesystem::remove_all(dir);
}
