// `wedge tokenize`, `wedge vocab train` and `wedge data stats`: the data room from the
// command line. Thin wrappers: parse flags, call data/, print.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/dataset_errors.h"
#include "data/snli.h"
#include "data/tokenizer.h"
#include "data/wikitext.h"
#include "data/wordpiece_trainer.h"
#include "tools/commands.h"

namespace wedge::tools {

namespace {

namespace fs = std::filesystem;
using data::Tokenizer;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

// ---- wedge tokenize ----------------------------------------------------------------------

struct TokenizeArgs {
  std::string vocab;
  std::vector<std::string> texts;
  bool json = false;
  bool special = false;
  std::size_t max_length = 0;
};

void print_encoding(const Tokenizer& tokenizer, const std::string& text, const TokenizeArgs& args) {
  std::vector<std::int32_t> ids = args.special ? tokenizer.encode_single(text, args.max_length).ids
                                               : tokenizer.encode(text);
  if (!args.special && args.max_length != 0 && ids.size() > args.max_length) ids.resize(args.max_length);
  const std::vector<std::string> tokens = tokenizer.id_to_tokens(ids);
  if (args.json) {
    std::cout << nlohmann::json{{"ids", ids}, {"tokens", tokens}}.dump() << '\n';
    return;
  }
  std::vector<std::string> id_text;
  for (const std::int32_t id : ids) id_text.push_back(std::to_string(id));
  std::cout << "ids:    " << join(id_text, " ") << '\n' << "tokens: " << join(tokens, " ") << '\n';
}

void run_tokenize(const TokenizeArgs& args) {
  const Tokenizer tokenizer = Tokenizer::from_file(args.vocab);
  if (!args.texts.empty()) {
    print_encoding(tokenizer, join(args.texts, " "), args);
    return;
  }
  std::string line;
  while (std::getline(std::cin, line)) print_encoding(tokenizer, line, args);
}

// ---- wedge vocab train -------------------------------------------------------------------

struct VocabTrainArgs {
  std::size_t size = 30522;
  std::string out;
  std::vector<std::string> files;
  std::uint64_t min_frequency = 1;
  std::uint64_t min_pair_frequency = 1;
  bool cased = false;
};

void run_vocab_train(const VocabTrainArgs& args) {
  data::WordPieceTrainerOptions options;
  options.vocab_size = args.size;
  options.min_word_frequency = args.min_frequency;
  options.min_pair_frequency = args.min_pair_frequency;
  options.normalizer.lowercase = !args.cased;
  data::WordPieceTrainer trainer(options);
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& file : args.files) {
    if (!fs::is_regular_file(file)) throw std::runtime_error(fmt::format("training text not found: {}", file));
    trainer.add_file(file);
    fmt::print(stderr, "read {}: {} words so far, {} distinct ({:.1f} s)\n", file, trainer.total_words(),
               trainer.distinct_words(), seconds_since(start));
  }
  if (trainer.distinct_words() == 0) throw std::runtime_error("the training files hold no words");
  const data::Vocab vocab = trainer.train(
      [&](const data::WordPieceTrainerProgress& p) {
        fmt::print(stderr, "merges {:>7}  vocabulary {:>7} / {}  ({:.1f} s)\n", p.merges, p.vocab_size, p.target,
                   seconds_since(start));
      },
      2000);
  vocab.save(args.out);
  fmt::print("wrote {} ({} tokens) in {:.1f} s\n", args.out, vocab.size(), seconds_since(start));
  if (static_cast<std::size_t>(vocab.size()) < args.size)
    fmt::print("note: the corpus ran out of pairs to merge before reaching {} tokens\n", args.size);
}

// ---- wedge data stats --------------------------------------------------------------------

struct DataStatsArgs {
  std::string data;
  std::string data_dir;
  std::string vocab;
  std::string release = "auto";
  std::size_t max_length = 48;
  bool no_cache = false;
};

// --vocab, else the BERT vocabulary next to or inside the data folder.
fs::path resolve_vocab(const DataStatsArgs& args) {
  if (!args.vocab.empty()) return args.vocab;
  return data::find_vocab_near(args.data_dir);
}

std::string percent(std::size_t part, std::size_t whole) {
  return whole == 0 ? "0.000%" : fmt::format("{:.3f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

void stats_wikitext(const DataStatsArgs& args, const Tokenizer& tokenizer) {
  data::WikiTextOptions options;
  if (args.release == "raw") options.release = data::WikiTextRelease::kRaw;
  else if (args.release == "tokens") options.release = data::WikiTextRelease::kTokens;
  else if (args.release != "auto") throw std::runtime_error(fmt::format("unknown --release '{}' (auto, raw or tokens)", args.release));
  if (args.no_cache) options.cache_dir.clear();
  std::size_t found = 0;
  for (const auto split : {data::WikiTextSplit::kTrain, data::WikiTextSplit::kValid, data::WikiTextSplit::kTest}) {
    if (!data::find_wikitext_file(args.data_dir, split, options.release)) {
      fmt::print("{:<5}  missing: no wiki.{}.raw or wiki.{}.tokens in {}\n", data::to_string(split),
                 data::to_string(split), data::to_string(split), args.data_dir);
      continue;
    }
    ++found;
    const auto start = std::chrono::steady_clock::now();
    const data::TokenStream s = data::load_wikitext_split(args.data_dir, split, tokenizer, options);
    fmt::print("{:<5}  {}  ({} release)\n", data::to_string(split), s.source.string(), data::to_string(s.release));
    fmt::print("       lines {}  bytes {}  tokens {}  [UNK] {} ({})  time {:.2f} s  cache {}\n", s.lines, s.bytes,
               s.ids.size(), s.unk_count, percent(s.unk_count, s.ids.size()), seconds_since(start),
               data::to_string(s.cache));
    if (!s.cache_note.empty()) fmt::print("       (cache not written: {})\n", s.cache_note);
  }
  if (found == 0)
    throw std::runtime_error(fmt::format("no WikiText-2 split found in {}. {}", args.data_dir, data::how_to_get("WikiText-2")));
}

void stats_snli(const DataStatsArgs& args, const Tokenizer& tokenizer) {
  std::size_t found = 0;
  const std::int32_t unk = tokenizer.vocab().unk_id();
  for (const char* split : {"train", "dev", "test"}) {
    const auto path = data::find_snli_file(args.data_dir, split);
    if (!path) {
      fmt::print("{:<5}  missing: no snli_1.0_{}.jsonl or snli_1.0_{}.txt in {}\n", split, split, split, args.data_dir);
      continue;
    }
    ++found;
    const auto start = std::chrono::steady_clock::now();
    const data::SnliFile file = data::read_snli_file(*path);
    std::size_t tokens = 0, unks = 0, over_length = 0, sentences = 0;
    std::vector<std::int32_t> ids;
    for (const data::SnliExample& ex : file.examples) {
      for (const std::string* sentence : {&ex.premise, &ex.hypothesis}) {
        ids.clear();
        tokenizer.encode_append(*sentence, ids);
        tokens += ids.size();
        unks += static_cast<std::size_t>(std::count(ids.begin(), ids.end(), unk));
        over_length += ids.size() + 2 > args.max_length;
        ++sentences;
      }
    }
    fmt::print("{:<5}  {}\n", split, path->string());
    fmt::print("       rows {}  labelled {}  dropped '-' {}  entailment {}  neutral {}  contradiction {}\n", file.rows,
               file.examples.size(), file.unlabelled, file.label_counts[0], file.label_counts[1], file.label_counts[2]);
    fmt::print("       tokens {}  [UNK] {} ({})  sentences over {} tokens {}  time {:.2f} s\n", tokens, unks,
               percent(unks, tokens), args.max_length, over_length, seconds_since(start));
  }
  const fs::path partial = fs::path(args.data_dir) / "partial";
  if (fs::is_directory(partial)) {
    for (const auto& entry : fs::directory_iterator(partial))
      if (entry.path().extension() == ".jsonl")
        fmt::print("note: {} is a partial sample, not counted as a split\n",
                   entry.path().string());
  }
  if (found == 0) throw std::runtime_error(fmt::format("no SNLI split found in {}. {}", args.data_dir, data::how_to_get("SNLI")));
}

void run_data_stats(const DataStatsArgs& args) {
  if (args.data != "wikitext2" && args.data != "snli")
    throw std::runtime_error(fmt::format("unknown --data '{}' (wikitext2 or snli)", args.data));
  if (!fs::is_directory(args.data_dir)) {
    const char* what = args.data == "snli" ? "SNLI" : "WikiText-2";
    throw std::runtime_error(fmt::format("{} folder not found: {}. {}", what, args.data_dir, data::how_to_get(what)));
  }
  const fs::path vocab = resolve_vocab(args);
  const Tokenizer tokenizer = Tokenizer::from_file(vocab);
  fmt::print("{} in {} (vocabulary {}, {} tokens)\n", args.data, args.data_dir, vocab.string(), tokenizer.vocab().size());
  if (args.data == "wikitext2") stats_wikitext(args, tokenizer);
  else stats_snli(args, tokenizer);
}

}  // namespace

void register_data_commands(CLI::App& app) {
  {
    auto args = std::make_shared<TokenizeArgs>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the BERT WordPiece ids and tokens of a text (or of each stdin line)");
    cmd->add_option("--vocab", args->vocab, "vocab.txt (one token per line)")->required();
    cmd->add_flag("--json", args->json, "one JSON object per input line with \"ids\" and \"tokens\"");
    cmd->add_flag("--special", args->special, "add [CLS] and [SEP]");
    cmd->add_option("--max-length", args->max_length, "cut to at most this many tokens (0: no limit)");
    cmd->add_option("text", args->texts, "text to tokenize (joined by spaces); stdin, line by line, when absent");
    cmd->callback([args] { run_tokenize(*args); });
  }
  {
    CLI::App* vocab = app.add_subcommand("vocab", "WordPiece vocabularies");
    vocab->require_subcommand(1);
    auto args = std::make_shared<VocabTrainArgs>();
    CLI::App* train = vocab->add_subcommand("train", "Learn a WordPiece vocabulary from text files");
    train->add_option("--size", args->size, "vocabulary size, special tokens included")->required();
    train->add_option("--out", args->out, "where to write vocab.txt")->required();
    train->add_option("--min-frequency", args->min_frequency, "ignore words seen fewer times");
    train->add_option("--min-pair-frequency", args->min_pair_frequency,
                      "never merge pairs seen fewer times (higher: fewer tokens per word; see data/README.md)");
    train->add_flag("--cased", args->cased, "keep case and accents (default: uncased, like bert-base-uncased)");
    train->add_option("files", args->files, "training text files")->required();
    train->callback([args] { run_vocab_train(*args); });
  }
  {
    CLI::App* data_cmd = app.add_subcommand("data", "Datasets");
    data_cmd->require_subcommand(1);
    auto args = std::make_shared<DataStatsArgs>();
    CLI::App* stats = data_cmd->add_subcommand("stats", "Lines, tokens, [UNK] rate and labels of each split found");
    stats->add_option("--data", args->data, "wikitext2 or snli")->required();
    stats->add_option("--data-dir", args->data_dir, "folder holding the dataset's files")->required();
    stats->add_option("--vocab", args->vocab, "vocab.txt (default: bert-base-uncased-vocab.txt beside the data)");
    stats->add_option("--release", args->release, "WikiText-2 release: auto, raw or tokens");
    stats->add_option("--max-length", args->max_length, "SNLI: count sentences longer than this (default 48)");
    stats->add_flag("--no-cache", args->no_cache, "WikiText-2: neither read nor write the token cache");
    stats->callback([args] { run_data_stats(*args); });
  }
}

}  // namespace wedge::tools
