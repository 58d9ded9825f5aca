// Tokenizer throughput in MB/s (Google Benchmark's bytes_per_second) on WikiText-2 train.
//
// The text is wiki.train.raw (10.9 MB) when the shared data folder can be found (set
// WEDGE_SHARED_DATA, or run from inside the checkout with ../shared/data beside it);
// otherwise 10 MB of generated ASCII text, so the program still runs anywhere.
//
//   build/bench/bench_tokenizer --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "data/basic_tokenizer.h"
#include "data/tokenizer.h"
#include "data/wikitext.h"
#include "data/wordpiece_trainer.h"

namespace fs = std::filesystem;
using namespace wedge::data;

namespace {

std::optional<fs::path> shared_data_dir() {
  if (const char* env = std::getenv("WEDGE_SHARED_DATA"); env && *env) return fs::path(env);
  std::error_code ec;
  for (fs::path dir = fs::canonical("/proc/self/exe", ec).parent_path(); !dir.empty() && dir != dir.root_path();
       dir = dir.parent_path()) {
    if (fs::is_directory(dir / "shared" / "data")) return dir / "shared" / "data";
  }
  return std::nullopt;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return std::move(s).str();
}

struct Corpus {
  std::string text;
  std::string source;
  std::optional<Tokenizer> tokenizer;
};

// Loaded once for all benchmarks.
const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus out;
    const auto dir = shared_data_dir();
    if (dir && fs::exists(*dir / "wikitext-2-raw" / "wiki.train.raw") && fs::exists(*dir / "bert-base-uncased-vocab.txt")) {
      out.text = read_file(*dir / "wikitext-2-raw" / "wiki.train.raw");
      out.source = "wiki.train.raw";
      out.tokenizer.emplace(Tokenizer::from_file(*dir / "bert-base-uncased-vocab.txt"));
      return out;
    }
    // Fallback: words drawn from a small list; vocabulary learned from the text itself.
    static const char* words[] = {"the", "of", "and", "in", "was", "game", "played", "1998", "season", ",", ".",
                                  "@-@", "Valkyria", "Chronicles", "released", "Japan", "character", "(", ")"};
    std::mt19937_64 rng(1);
    while (out.text.size() < 10'000'000) {
      out.text += words[rng() % std::size(words)];
      out.text += rng() % 20 == 0 ? " \n" : " ";
    }
    out.source = "generated text";
    WordPieceTrainerOptions options;
    options.vocab_size = 2000;
    WordPieceTrainer trainer(options);
    trainer.add_text(out.text.substr(0, 1'000'000));
    out.tokenizer.emplace(trainer.train());
    return out;
  }();
  return c;
}

void BM_EncodeWikiTextTrain(benchmark::State& state) {
  const Corpus& c = corpus();
  std::size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = c.tokenizer->encode(c.text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * c.text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.SetLabel(c.source);
}
BENCHMARK(BM_EncodeWikiTextTrain)->Unit(benchmark::kMillisecond)->MinTime(1.0);

// The loader's path: the same text cut at line breaks over N threads.
void BM_EncodeWikiTextTrainThreads(benchmark::State& state) {
  const Corpus& c = corpus();
  const auto threads = static_cast<unsigned>(state.range(0));
  for (auto _ : state) {
    const auto ids = tokenize_wikitext_text(c.text, WikiTextRelease::kRaw, *c.tokenizer, false, threads);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * c.text.size()));
  state.SetLabel(c.source);
}
BENCHMARK(BM_EncodeWikiTextTrainThreads)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();

// Normalisation and word splitting alone (no WordPiece).
void BM_BasicTokenizerOnly(benchmark::State& state) {
  const Corpus& c = corpus();
  const BasicTokenizer basic;
  WordList words;
  for (auto _ : state) {
    words.clear();
    basic.split(c.text, words);
    benchmark::DoNotOptimize(words.size());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * c.text.size()));
}
BENCHMARK(BM_BasicTokenizerOnly)->Unit(benchmark::kMillisecond)->MinTime(1.0);

// Short sentences one by one, as SNLI encodes them.
void BM_EncodeSentences(benchmark::State& state) {
  const Corpus& c = corpus();
  std::vector<std::string> lines;
  std::istringstream in(c.text.substr(0, 2'000'000));
  for (std::string line; std::getline(in, line);)
    for (std::size_t at = 0; at < line.size(); at += 100) lines.push_back(line.substr(at, 100));
  std::size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size();
  for (auto _ : state) {
    for (const auto& l : lines) benchmark::DoNotOptimize(c.tokenizer->encode_single(l, 48).ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_EncodeSentences)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
