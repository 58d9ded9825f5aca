// `wedge tokenize`, `wedge vocab train` and `wedge data stats`: the data room from the
// command line. Thin wrappers: parse flags, call data/, print.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
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
#include "data/unicode.h"
#include "data/wikitext.h"
#include "data/wordpiece_trainer.h"
#include "engine/text_escape.h"
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

// A whole number in [min, max], checked on the text itself before CLI11 converts it (so
// "-5" is refused instead of wrapping round in an unsigned flag, and "3.5", "1e3", "nan" or
// "12abc" are refused instead of being cut or read as something else). CLI11 puts the flag's
// name in front of the message.
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  const std::string allowed = max == std::numeric_limits<std::uint64_t>::max()
                                  ? fmt::format("a whole number, at least {}", min)
                                  : fmt::format("a whole number from {} to {}", min, max);
  return CLI::Validator(
      [min, max, allowed](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max)
          return fmt::format("'{}' is not allowed: give {}", printable(text, 40), allowed);
        return {};
      },
      allowed, "WHOLE_NUMBER");
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
  if (args.json) {  // JSON escapes control characters itself
    std::cout << nlohmann::json{{"ids", ids}, {"tokens", tokens}}.dump() << '\n';
    return;
  }
  std::vector<std::string> id_text;
  for (const std::int32_t id : ids) id_text.push_back(std::to_string(id));
  std::cout << "ids:    " << join(id_text, " ") << '\n' << "tokens: " << join(tokens, " ") << '\n';
}

void run_tokenize(const TokenizeArgs& args) {
  if (args.special && args.max_length == 1)
    throw std::invalid_argument("--max-length 1 leaves no room for [CLS] and [SEP] with --special: give 0 (no limit) "
                                "or at least 2");
  const Tokenizer tokenizer = Tokenizer::from_file(args.vocab);
  // Bytes that are not UTF-8 become [UNK] (data/basic_tokenizer.h); say how many there were.
  std::size_t ill_formed = 0, first_line = 0, line_number = 0;
  auto count_ill_formed = [&](std::string_view text) {
    ++line_number;
    const std::size_t n = data::unicode::find_ill_formed_utf8(text).count;
    if (n > 0 && ill_formed == 0) first_line = line_number;
    ill_formed += n;
  };
  if (!args.texts.empty()) {
    const std::string text = join(args.texts, " ");
    count_ill_formed(text);
    print_encoding(tokenizer, text, args);
  } else {
    // A folder as stdin reads as empty rather than failing; say what is wrong instead.
    struct stat input {};
    if (::fstat(STDIN_FILENO, &input) == 0 && S_ISDIR(input.st_mode))
      throw std::runtime_error("the standard input is a folder; give text (or a text file) on stdin, or TEXT arguments");
    std::string line;
    while (std::getline(std::cin, line)) {
      count_ill_formed(line);
      print_encoding(tokenizer, line, args);
    }
    if (std::cin.bad()) throw std::runtime_error("read error on the standard input");
  }
  std::cout.flush();
  if (ill_formed > 0)
    fmt::print(stderr, "note: {}\n",
               data::ill_formed_utf8_note(args.texts.empty() ? "standard input" : "the text", ill_formed, first_line));
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
  // Everything that can be checked before the (possibly long) training is checked first.
  std::error_code ec;
  for (const std::string& file : args.files) {
    if (fs::is_directory(file, ec))
      throw std::runtime_error(fmt::format("training text {} is a folder; name the text files", printable(file)));
    if (!fs::is_regular_file(file, ec)) throw std::runtime_error(fmt::format("training text not found: {}", printable(file)));
  }
  const fs::path out = args.out;
  if (args.out.empty()) throw std::runtime_error("--out is empty; give the vocabulary file to write");
  if (fs::is_directory(out, ec))
    throw std::runtime_error(fmt::format("--out {} is a folder; give the vocabulary file to write", printable(args.out)));
  const fs::path out_folder = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (!fs::is_directory(out_folder, ec))
    throw std::runtime_error(fmt::format("--out {}: the folder {} does not exist", printable(args.out),
                                         printable(out_folder.string())));

  data::WordPieceTrainerOptions options;
  options.vocab_size = args.size;
  options.min_word_frequency = args.min_frequency;
  options.min_pair_frequency = args.min_pair_frequency;
  options.normalizer.lowercase = !args.cased;
  data::WordPieceTrainer trainer(options);
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& file : args.files) {
    const data::TrainingTextReport report = trainer.add_file(file);
    fmt::print(stderr, "read {}: {} words so far, {} distinct ({:.1f} s)\n", printable(file), trainer.total_words(),
               trainer.distinct_words(), seconds_since(start));
    if (report.ill_formed_utf8 > 0)
      fmt::print(stderr, "note: {}\n",
                 data::ill_formed_utf8_note(printable(file), report.ill_formed_utf8, report.first_ill_formed_line));
  }
  if (trainer.skipped_words() > 0)
    fmt::print(stderr, "note: {} words holding bytes that are not UTF-8 were left out of training\n",
               trainer.skipped_words());
  if (trainer.distinct_words() == 0)
    throw std::runtime_error(fmt::format("the training text ({}) holds no words", printable(join(args.files, ", "), 200)));
  const data::Vocab vocab = trainer.train(
      [&](const data::WordPieceTrainerProgress& p) {
        fmt::print(stderr, "merges {:>7}  vocabulary {:>7} / {}  ({:.1f} s)\n", p.merges, p.vocab_size, p.target,
                   seconds_since(start));
      },
      2000);
  vocab.save(args.out);
  fmt::print("wrote {} ({} tokens) in {:.1f} s\n", printable(args.out), vocab.size(), seconds_since(start));
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
  if (args.no_cache) options.cache_dir.clear();
  std::size_t found = 0;
  for (const auto split : {data::WikiTextSplit::kTrain, data::WikiTextSplit::kValid, data::WikiTextSplit::kTest}) {
    if (!data::find_wikitext_file(args.data_dir, split, options.release)) {
      fmt::print("{:<5}  missing: no wiki.{}.raw or wiki.{}.tokens in {}\n", data::to_string(split),
                 data::to_string(split), data::to_string(split), printable(args.data_dir));
      continue;
    }
    ++found;
    const auto start = std::chrono::steady_clock::now();
    const data::TokenStream s = data::load_wikitext_split(args.data_dir, split, tokenizer, options);
    fmt::print("{:<5}  {}  ({} release)\n", data::to_string(split), data::display_path(s.source),
               data::to_string(s.release));
    fmt::print("       lines {}  bytes {}  tokens {}  [UNK] {} ({})  not UTF-8 {}  time {:.2f} s  cache {}\n", s.lines,
               s.bytes, s.ids.size(), s.unk_count, percent(s.unk_count, s.ids.size()), s.ill_formed_utf8,
               seconds_since(start), data::to_string(s.cache));
    for (const std::string& note : s.notes) fmt::print("       note: {}\n", note);
    if (!s.cache_note.empty()) fmt::print("       (cache not written: {})\n", s.cache_note);
  }
  if (found == 0)
    throw std::runtime_error(
        fmt::format("no WikiText-2 split found in {}. {}", printable(args.data_dir), data::how_to_get("WikiText-2")));
}

void stats_snli(const DataStatsArgs& args, const Tokenizer& tokenizer) {
  std::size_t found = 0;
  const std::int32_t unk = tokenizer.vocab().unk_id();
  for (const char* split : {"train", "dev", "test"}) {
    const auto path = data::find_snli_file(args.data_dir, split);
    if (!path) {
      fmt::print("{:<5}  missing: no snli_1.0_{}.jsonl or snli_1.0_{}.txt in {}\n", split, split, split,
                 printable(args.data_dir));
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
    fmt::print("{:<5}  {}\n", split, data::display_path(*path));
    fmt::print("       rows {}  labelled {}  dropped '-' {}  entailment {}  neutral {}  contradiction {}\n", file.rows,
               file.examples.size(), file.unlabelled, file.label_counts[0], file.label_counts[1], file.label_counts[2]);
    fmt::print("       tokens {}  [UNK] {} ({})  sentences over {} tokens {}  time {:.2f} s\n", tokens, unks,
               percent(unks, tokens), args.max_length, over_length, seconds_since(start));
  }
  const fs::path partial = fs::path(args.data_dir) / "partial";
  std::error_code ec;
  if (fs::is_directory(partial, ec)) {
    for (const auto& entry : fs::directory_iterator(partial, ec))
      if (entry.path().extension() == ".jsonl")
        fmt::print("note: {} is a partial sample, not counted as a split\n", data::display_path(entry.path()));
  }
  if (found == 0)
    throw std::runtime_error(fmt::format("no SNLI split found in {}. {}", printable(args.data_dir), data::how_to_get("SNLI")));
}

void run_data_stats(const DataStatsArgs& args) {
  if (args.data != "wikitext2" && args.data != "snli")
    throw std::runtime_error(fmt::format("unknown --data '{}' (wikitext2 or snli)", printable(args.data, 40)));
  const char* what = args.data == "snli" ? "SNLI" : "WikiText-2";
  std::error_code ec;
  if (fs::exists(args.data_dir, ec) && !fs::is_directory(args.data_dir, ec))
    throw std::runtime_error(fmt::format("--data-dir {} is a file; give the folder that holds the {} files",
                                         printable(args.data_dir), what));
  if (!fs::is_directory(args.data_dir, ec))
    throw std::runtime_error(fmt::format("{} folder not found: {}. {}", what, printable(args.data_dir), data::how_to_get(what)));
  const fs::path vocab = resolve_vocab(args);
  const Tokenizer tokenizer = Tokenizer::from_file(vocab);
  fmt::print("{} in {} (vocabulary {}, {} tokens)\n", args.data, printable(args.data_dir), data::display_path(vocab),
             tokenizer.vocab().size());
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
    cmd->add_option("--max-length", args->max_length, "cut to at most this many tokens (0: no limit)")
        ->check(whole_number(0, std::numeric_limits<std::int32_t>::max()));
    cmd->add_option("text", args->texts, "text to tokenize (joined by spaces); stdin, line by line, when absent");
    cmd->callback([args] { run_tokenize(*args); });
  }
  {
    CLI::App* vocab = app.add_subcommand("vocab", "WordPiece vocabularies");
    vocab->require_subcommand(1);
    auto args = std::make_shared<VocabTrainArgs>();
    CLI::App* train = vocab->add_subcommand("train", "Learn a WordPiece vocabulary from text files");
    // Ids are 32-bit; the five special tokens come first, so 6 is the smallest useful size.
    train->add_option("--size", args->size, "vocabulary size, special tokens included")
        ->required()
        ->check(whole_number(6, std::numeric_limits<std::int32_t>::max()));
    train->add_option("--out", args->out, "where to write vocab.txt")->required();
    train->add_option("--min-frequency", args->min_frequency, "ignore words seen fewer times")
        ->check(whole_number(1, std::numeric_limits<std::uint64_t>::max()));
    train->add_option("--min-pair-frequency", args->min_pair_frequency,
                      "never merge pairs seen fewer times (higher: fewer tokens per word; see data/README.md)")
        ->check(whole_number(1, std::numeric_limits<std::uint64_t>::max()));
    train->add_flag("--cased", args->cased, "keep case and accents (default: uncased, like bert-base-uncased)");
    train->add_option("files", args->files, "training text files")->required();
    train->callback([args] { run_vocab_train(*args); });
  }
  {
    CLI::App* data_cmd = app.add_subcommand("data", "Datasets");
    data_cmd->require_subcommand(1);
    auto args = std::make_shared<DataStatsArgs>();
    CLI::App* stats = data_cmd->add_subcommand("stats", "Lines, tokens, [UNK] rate and labels of each split found");
    stats->add_option("--data", args->data, "wikitext2 or snli")->required()->check(CLI::IsMember({"wikitext2", "snli"}));
    stats->add_option("--data-dir", args->data_dir, "folder holding the dataset's files")->required();
    stats->add_option("--vocab", args->vocab, "vocab.txt (default: bert-base-uncased-vocab.txt beside the data)");
    stats->add_option("--release", args->release, "WikiText-2 release: auto, raw or tokens")
        ->check(CLI::IsMember({"auto", "raw", "tokens"}));
    stats->add_option("--max-length", args->max_length, "SNLI: count sentences longer than this (default 48)")
        ->check(whole_number(2, std::numeric_limits<std::int32_t>::max()));
    stats->add_flag("--no-cache", args->no_cache, "WikiText-2: neither read nor write the token cache");
    stats->callback([args] { run_data_stats(*args); });
  }
}

}  // namespace wedge::tools
