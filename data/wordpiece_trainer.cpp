#include "data/wordpiece_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <queue>
#include <stdexcept>

#include "data/dataset_errors.h"
#include "data/tokenizer.h"
#include "data/unicode.h"
#include "engine/text_escape.h"

namespace wedge::data {

namespace {

using SymbolId = std::uint32_t;

std::uint64_t pair_key(SymbolId a, SymbolId b) { return (static_cast<std::uint64_t>(a) << 32) | b; }
SymbolId pair_left(std::uint64_t key) { return static_cast<SymbolId>(key >> 32); }
SymbolId pair_right(std::uint64_t key) { return static_cast<SymbolId>(key & 0xFFFFFFFFu); }

// The characters of a (valid UTF-8) word as WordPiece symbols: "low" → "l", "##o", "##w".
std::vector<std::string> initial_symbols(std::string_view word) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < word.size()) {
    std::size_t j = i + 1;
    while (j < word.size() && (static_cast<unsigned char>(word[j]) & 0xC0) == 0x80) ++j;
    std::string symbol = i == 0 ? std::string() : std::string(kContinuingPrefix);
    symbol.append(word.substr(i, j - i));
    out.push_back(std::move(symbol));
    i = j;
  }
  return out;
}

// All the mutable state of one training run.
class MergeState {
 public:
  struct Word {
    std::vector<SymbolId> symbols;
    std::uint64_t count;
  };

  std::vector<std::string> symbol_text;
  std::unordered_map<std::string, SymbolId> symbol_ids;
  std::vector<std::uint64_t> symbol_freq;
  std::vector<Word> words;
  std::uint64_t min_count = 1;  // pairs rarer than this are never candidates

  SymbolId symbol(const std::string& text) {
    const auto it = symbol_ids.find(text);
    if (it != symbol_ids.end()) return it->second;
    const auto id = static_cast<SymbolId>(symbol_text.size());
    symbol_text.push_back(text);
    symbol_ids.emplace(text, id);
    symbol_freq.push_back(0);
    pairs_of_symbol_.emplace_back();
    return id;
  }

  void count_all_pairs() {
    word_stamp_.assign(words.size(), 0);
    for (std::uint32_t w = 0; w < words.size(); ++w) {
      for (const SymbolId s : words[w].symbols) symbol_freq[s] += words[w].count;
      add_pairs(w);
    }
    for (auto& [key, stat] : pairs_) push(key, stat);
  }

  // The best pair still present, or false when none is left.
  bool pop_best(SymbolId& a, SymbolId& b) {
    while (!heap_.empty()) {
      const Candidate top = heap_.top();
      heap_.pop();
      const auto it = pairs_.find(top.key);
      if (it == pairs_.end() || it->second.version != top.version || it->second.count == 0) continue;
      a = pair_left(top.key);
      b = pair_right(top.key);
      return true;
    }
    return false;
  }

  // Replaces every occurrence of (a, b) by c, keeping pair counts and scores current.
  void merge(SymbolId a, SymbolId b, SymbolId c) {
    ++merge_stamp_;
    touched_.clear();
    const std::uint64_t key = pair_key(a, b);
    std::vector<std::uint32_t> word_list = std::move(pairs_[key].words);
    for (const std::uint32_t w : word_list) {
      if (word_stamp_[w] == merge_stamp_) continue;  // listed twice
      word_stamp_[w] = merge_stamp_;
      Word& word = words[w];
      bool present = false;
      for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i)
        if (word.symbols[i] == a && word.symbols[i + 1] == b) present = true;
      if (!present) continue;  // stale entry: the pair left this word in an earlier merge
      remove_pairs(w);
      std::vector<SymbolId> merged;
      merged.reserve(word.symbols.size());
      for (std::size_t i = 0; i < word.symbols.size(); ++i) {
        if (i + 1 < word.symbols.size() && word.symbols[i] == a && word.symbols[i + 1] == b) {
          merged.push_back(c);
          symbol_freq[a] -= word.count;
          symbol_freq[b] -= word.count;
          symbol_freq[c] += word.count;
          ++i;
        } else {
          merged.push_back(word.symbols[i]);
        }
      }
      word.symbols = std::move(merged);
      add_pairs(w);
    }
    pairs_.erase(key);
    // Scores of every pair containing a, b or c changed with their frequencies.
    for (const SymbolId s : {a, b, c}) {
      auto& list = pairs_of_symbol_[s];
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
      std::erase_if(list, [&](std::uint64_t k) {
        const auto it = pairs_.find(k);
        if (it == pairs_.end()) return true;  // the pair no longer exists
        if (it->second.stamp != merge_stamp_) {
          it->second.stamp = merge_stamp_;
          touched_.push_back(k);
        }
        return false;
      });
    }
    for (const std::uint64_t k : touched_) {
      const auto it = pairs_.find(k);
      if (it == pairs_.end()) continue;
      if (it->second.count == 0) {
        pairs_.erase(it);
        continue;
      }
      push(k, it->second);
    }
  }

 private:
  struct PairStat {
    std::uint64_t count = 0;
    std::uint32_t version = 0;
    std::uint64_t stamp = 0;
    std::vector<std::uint32_t> words;  // may hold stale and repeated entries
  };
  // A heap entry remembers what it was scored with; only the newest version of a pair counts.
  struct Candidate {
    std::uint64_t count, freq_a, freq_b, key;
    std::uint32_t version;
  };
  struct WorseThan {
    const std::vector<std::string>* text;
    bool operator()(const Candidate& x, const Candidate& y) const {
      // x.count / (x.fa x.fb) < y.count / (y.fa y.fb), compared exactly
      using u128 = unsigned __int128;
      const u128 lhs = static_cast<u128>(x.count) * y.freq_a * y.freq_b;
      const u128 rhs = static_cast<u128>(y.count) * x.freq_a * x.freq_b;
      if (lhs != rhs) return lhs < rhs;
      if (x.count != y.count) return x.count < y.count;
      const int by_left = (*text)[pair_left(x.key)].compare((*text)[pair_left(y.key)]);
      if (by_left != 0) return by_left > 0;
      return (*text)[pair_right(x.key)] > (*text)[pair_right(y.key)];
    }
  };

  void push(std::uint64_t key, PairStat& stat) {
    ++stat.version;  // invalidates the pair's older heap entries in any case
    if (stat.count < min_count) return;
    heap_.push({stat.count, symbol_freq[pair_left(key)], symbol_freq[pair_right(key)], key, stat.version});
  }

  void add_pairs(std::uint32_t w) {
    const Word& word = words[w];
    for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const std::uint64_t key = pair_key(word.symbols[i], word.symbols[i + 1]);
      auto [it, inserted] = pairs_.try_emplace(key);
      PairStat& stat = it->second;
      stat.count += word.count;
      if (stat.words.empty() || stat.words.back() != w) stat.words.push_back(w);
      if (inserted) {
        pairs_of_symbol_[word.symbols[i]].push_back(key);
        pairs_of_symbol_[word.symbols[i + 1]].push_back(key);
      }
      if (merge_stamp_ != 0 && stat.stamp != merge_stamp_) {
        stat.stamp = merge_stamp_;
        touched_.push_back(key);
      }
    }
  }

  void remove_pairs(std::uint32_t w) {
    const Word& word = words[w];
    for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const std::uint64_t key = pair_key(word.symbols[i], word.symbols[i + 1]);
      PairStat& stat = pairs_[key];
      stat.count -= word.count;
      if (stat.stamp != merge_stamp_) {
        stat.stamp = merge_stamp_;
        touched_.push_back(key);
      }
    }
  }

  std::unordered_map<std::uint64_t, PairStat> pairs_;
  std::vector<std::vector<std::uint64_t>> pairs_of_symbol_;
  std::priority_queue<Candidate, std::vector<Candidate>, WorseThan> heap_{WorseThan{&symbol_text}};
  std::vector<std::uint64_t> word_stamp_;
  std::vector<std::uint64_t> touched_;
  std::uint64_t merge_stamp_ = 0;
};

}  // namespace

WordPieceTrainer::WordPieceTrainer(WordPieceTrainerOptions options)
    : options_(std::move(options)), basic_(options_.normalizer) {}

void WordPieceTrainer::add_text(std::string_view text) {
  WordList words;
  basic_.split(text, words);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string_view w = words[i];
    // A word holding bytes that were not UTF-8 is [UNK] at encoding time; learning pieces
    // from it would only give U+FFFD a place in the vocabulary.
    if (w.find(unicode::kReplacementUtf8) != std::string_view::npos) {
      ++skipped_words_;
      continue;
    }
    auto it = word_counts_.find(std::string(w));
    if (it == word_counts_.end()) word_counts_.emplace(std::string(w), 1);
    else ++it->second;
  }
  total_words_ += words.size();
}

TrainingTextReport WordPieceTrainer::add_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read training text {}", printable(path.string())));
  TrainingTextReport report;
  std::string line;
  while (std::getline(in, line)) {
    ++report.lines;
    if (const unicode::IllFormedUtf8 bad = unicode::find_ill_formed_utf8(line); bad.count > 0) {
      if (report.ill_formed_utf8 == 0) report.first_ill_formed_line = report.lines;
      report.ill_formed_utf8 += bad.count;
    }
    add_text(line);
  }
  if (in.bad()) throw std::runtime_error(fmt::format("read error in training text {}", printable(path.string())));
  return report;
}

Vocab WordPieceTrainer::train(const std::function<void(const WordPieceTrainerProgress&)>& progress,
                              std::size_t progress_every) const {
  std::vector<std::string> vocab_tokens;
  for (const std::string& s : options_.special_tokens)
    if (std::find(vocab_tokens.begin(), vocab_tokens.end(), s) == vocab_tokens.end()) vocab_tokens.push_back(s);
  if (options_.vocab_size <= vocab_tokens.size())
    throw std::invalid_argument(fmt::format("vocabulary size {} leaves no room beside the {} special tokens",
                                            options_.vocab_size, vocab_tokens.size()));

  // Words in a fixed order (by spelling), so nothing depends on hash-table order.
  std::vector<std::pair<std::string_view, std::uint64_t>> words;
  for (const auto& [w, n] : word_counts_) {
    if (n < options_.min_word_frequency) continue;
    std::size_t chars = 0;
    for (const char ch : w) chars += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    if (chars > options_.max_word_chars) continue;
    words.emplace_back(w, n);
  }
  std::sort(words.begin(), words.end());

  // The alphabet, trimmed to the most frequent symbols when it does not fit.
  std::map<std::string, std::uint64_t> alphabet_freq;
  std::vector<std::vector<std::string>> spelled(words.size());
  for (std::size_t i = 0; i < words.size(); ++i) {
    spelled[i] = initial_symbols(words[i].first);
    for (const std::string& s : spelled[i]) alphabet_freq[s] += words[i].second;
  }
  std::vector<std::pair<std::string, std::uint64_t>> alphabet(alphabet_freq.begin(), alphabet_freq.end());
  const std::size_t room = options_.vocab_size - vocab_tokens.size();
  if (alphabet.size() > room) {
    std::stable_sort(alphabet.begin(), alphabet.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    alphabet.resize(room);
    std::sort(alphabet.begin(), alphabet.end());
  }

  MergeState state;
  // A pair rarer than the threshold is never queued; every change of its count queues it
  // again, so it becomes a candidate once a merge makes it frequent enough.
  state.min_count = std::max<std::uint64_t>(1, options_.min_pair_frequency);
  for (const auto& [symbol, freq] : alphabet) {
    state.symbol(symbol);
    if (std::find(vocab_tokens.begin(), vocab_tokens.end(), symbol) == vocab_tokens.end())
      vocab_tokens.push_back(symbol);
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    MergeState::Word word{{}, words[i].second};
    bool complete = true;
    for (const std::string& s : spelled[i]) {
      const auto it = state.symbol_ids.find(s);
      if (it == state.symbol_ids.end()) {
        complete = false;  // holds a character that did not fit in the alphabet
        break;
      }
      word.symbols.push_back(it->second);
    }
    if (complete) state.words.push_back(std::move(word));
  }
  state.count_all_pairs();

  WordPieceTrainerProgress report{0, vocab_tokens.size(), options_.vocab_size};
  std::unordered_map<std::string, bool> in_vocab;
  for (const std::string& t : vocab_tokens) in_vocab[t] = true;
  SymbolId a, b;
  while (vocab_tokens.size() < options_.vocab_size && state.pop_best(a, b)) {
    std::string_view right = state.symbol_text[b];
    if (right.starts_with(kContinuingPrefix)) right.remove_prefix(kContinuingPrefix.size());
    std::string merged = state.symbol_text[a] + std::string(right);
    const SymbolId c = state.symbol(merged);
    state.merge(a, b, c);
    // Two different merges can spell the same piece ("x"+"##yz", "xy"+"##z"); it enters once.
    if (in_vocab.emplace(merged, true).second) vocab_tokens.push_back(merged);
    ++report.merges;
    report.vocab_size = vocab_tokens.size();
    if (progress && progress_every > 0 && report.merges % progress_every == 0) progress(report);
  }
  if (progress) progress(report);
  return Vocab::from_tokens(std::move(vocab_tokens), "<trained>");
}

}  // namespace wedge::data
