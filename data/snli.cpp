#include "data/snli.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "data/dataset_errors.h"
#include "data/unicode.h"
#include "data/wikitext.h"  // seeded_permutation
#include "engine/text_escape.h"

namespace wedge::data {

namespace {

std::int32_t parse_label(std::string_view label, const std::string& name, std::size_t line) {
  for (std::size_t i = 0; i < kNliLabelNames.size(); ++i)
    if (label == kNliLabelNames[i]) return static_cast<std::int32_t>(i);
  throw std::runtime_error(fmt::format("{}:{}: unknown gold_label '{}' (expected entailment, neutral, "
                                       "contradiction or -)",
                                       name, line, printable(label, 60)));
}

// SNLI is published as UTF-8 (and JSON must be UTF-8), so a row that is not is damaged: an
// error naming the line and where in it, rather than a sentence quietly tokenized without
// the bad bytes.
void check_utf8(std::string_view text, const std::string& name, std::size_t line) {
  const unicode::IllFormedUtf8 bad = unicode::find_ill_formed_utf8(text);
  if (bad.count == 0) return;
  throw std::runtime_error(fmt::format("{}:{}: not valid UTF-8 (byte 0x{:02x} at column {}); the SNLI files are UTF-8, "
                                       "so this one is damaged or is not an SNLI file",
                                       name, line, static_cast<unsigned char>(text[bad.first_offset]),
                                       bad.first_offset + 1));
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

void add_row(SnliFile& file, std::string_view label, std::string premise, std::string hypothesis, std::size_t line) {
  ++file.rows;
  if (label == "-") {
    ++file.unlabelled;
    return;
  }
  const std::int32_t id = parse_label(label, file.name, line);
  ++file.label_counts[static_cast<std::size_t>(id)];
  file.examples.push_back({std::move(premise), std::move(hypothesis), id, line});
}

std::string json_string_field(const nlohmann::json& row, const char* field, const std::string& name, std::size_t line) {
  const auto it = row.find(field);
  if (it == row.end()) throw std::runtime_error(fmt::format("{}:{}: the row has no \"{}\" field", name, line, field));
  if (!it->is_string())
    throw std::runtime_error(fmt::format("{}:{}: the \"{}\" field is not a string", name, line, field));
  return it->get<std::string>();
}

void parse_jsonl(std::istream& in, SnliFile& file) {
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (blank(text)) continue;
    check_utf8(text, file.name, line);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(fmt::format("{}:{}: malformed JSON: {}", file.name, line, printable(e.what(), 200)));
    }
    if (!row.is_object()) throw std::runtime_error(fmt::format("{}:{}: the row is not a JSON object", file.name, line));
    std::string label = json_string_field(row, "gold_label", file.name, line);
    add_row(file, label, json_string_field(row, "sentence1", file.name, line),
            json_string_field(row, "sentence2", file.name, line), line);
  }
}

std::vector<std::string_view> split_tabs(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t tab = s.find('\t', start);
    out.push_back(s.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) return out;
    start = tab + 1;
  }
}

void parse_tsv(std::istream& in, SnliFile& file) {
  std::string text;
  std::size_t line = 0;
  std::size_t label_col = 0, s1_col = 0, s2_col = 0, columns = 0;
  bool have_header = false;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (blank(text)) continue;
    check_utf8(text, file.name, line);
    const auto fields = split_tabs(text);
    if (!have_header) {
      auto column = [&](std::string_view wanted) {
        const auto it = std::find(fields.begin(), fields.end(), wanted);
        if (it == fields.end())
          throw std::runtime_error(fmt::format("{}:{}: the header has no '{}' column (an SNLI .txt file starts with "
                                               "gold_label, sentence1_binary_parse, ...)",
                                               file.name, line, wanted));
        return static_cast<std::size_t>(it - fields.begin());
      };
      label_col = column("gold_label");
      s1_col = column("sentence1");
      s2_col = column("sentence2");
      columns = fields.size();
      have_header = true;
      continue;
    }
    // The released files are known to have a few rows with fewer trailing columns; the ones
    // we read must be there.
    if (fields.size() > columns || std::max({label_col, s1_col, s2_col}) >= fields.size())
      throw std::runtime_error(fmt::format("{}:{}: expected {} tab-separated columns, found {}", file.name, line, columns,
                                           fields.size()));
    add_row(file, fields[label_col], std::string(fields[s1_col]), std::string(fields[s2_col]), line);
  }
}

}  // namespace

SnliFile parse_snli(std::istream& in, const std::string& name, SnliFormat format) {
  SnliFile file;
  file.name = name;
  if (format == SnliFormat::kJsonl) parse_jsonl(in, file);
  else parse_tsv(in, file);
  if (file.rows == 0) throw std::runtime_error(fmt::format("{}: no SNLI rows in the file (is it empty?)", name));
  return file;
}

SnliFile read_snli_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error(fmt::format("SNLI file {} is a folder", display_path(path)));
  if (!in) throw std::runtime_error(missing_file_message(path, "SNLI"));
  const SnliFormat format = path.extension() == ".jsonl" ? SnliFormat::kJsonl : SnliFormat::kTsv;
  SnliFile file = parse_snli(in, display_path(path), format);
  if (in.bad()) throw std::runtime_error(fmt::format("{}: read error", display_path(path)));
  return file;
}

std::optional<std::filesystem::path> find_snli_file(const std::filesystem::path& dir, const std::string& split) {
  for (const char* ext : {".jsonl", ".txt"}) {
    for (const auto& folder : {dir, dir / "snli_1.0", dir / "snli"}) {
      const auto path = folder / ("snli_1.0_" + split + ext);
      std::error_code ec;
      if (std::filesystem::is_regular_file(path, ec)) return path;
    }
  }
  return std::nullopt;
}

SnliFile load_snli_split(const std::filesystem::path& dir, const std::string& split) {
  if (split != "train" && split != "dev" && split != "test")
    throw std::invalid_argument(fmt::format("unknown SNLI split '{}' (train, dev or test)", split));
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error(fmt::format("SNLI folder not found: {}. {}", display_path(dir), how_to_get("SNLI")));
  const auto path = find_snli_file(dir, split);
  if (!path)
    throw std::runtime_error(fmt::format("SNLI {} split not found: {} (or snli_1.0_{}.txt) is missing. {}", split,
                                         display_path(dir / ("snli_1.0_" + split + ".jsonl")), split, how_to_get("SNLI")));
  return read_snli_file(*path);
}

// ---- tokenized dataset and batches -------------------------------------------------------

SnliDataset::SnliDataset(const SnliFile& file, const Tokenizer& tokenizer, SnliOptions options) {
  const Vocab& vocab = tokenizer.vocab();
  cls_id_ = vocab.cls_id();
  sep_id_ = vocab.sep_id();
  pad_id_ = vocab.pad_id() >= 0 ? vocab.pad_id() : 0;
  if (cls_id_ < 0 || sep_id_ < 0)
    throw std::runtime_error(fmt::format("the vocabulary {} lacks [CLS] or [SEP], which SNLI sequences need",
                                         printable(vocab.source_name())));
  if (options.max_length < 2) throw std::invalid_argument("SNLI max_length must be at least 2 ([CLS] and [SEP])");
  examples_.resize(file.examples.size());
  unsigned threads = options.threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : options.threads;
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, 1 + file.examples.size() / 1000));
  auto work = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const SnliExample& ex = file.examples[i];
      SnliEncoded& out = examples_[i];
      out.label = ex.label;
      out.truncated = false;
      for (auto [text, ids] : {std::pair{&ex.premise, &out.premise}, std::pair{&ex.hypothesis, &out.hypothesis}}) {
        ids->push_back(cls_id_);
        tokenizer.encode_append(*text, *ids);
        if (ids->size() + 1 > options.max_length) {
          ids->resize(options.max_length - 1);
          out.truncated = true;
        }
        ids->push_back(sep_id_);
      }
    }
  };
  std::vector<std::thread> pool;
  const std::size_t n = examples_.size();
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, n * t / threads, n * (t + 1) / threads);
  work(0, n / threads);
  for (auto& th : pool) th.join();
}

std::size_t SnliDataset::truncated_count() const {
  return static_cast<std::size_t>(
      std::count_if(examples_.begin(), examples_.end(), [](const SnliEncoded& e) { return e.truncated; }));
}

std::vector<std::uint32_t> SnliDataset::epoch_order(std::uint64_t seed, std::uint64_t epoch) const {
  return seeded_permutation(size(), seed, epoch);
}

SnliBatch SnliDataset::batch(std::span<const std::uint32_t> order, std::size_t index, std::size_t batch_size) const {
  if (batch_size == 0) throw std::invalid_argument("SNLI batch size must be at least 1");
  const std::size_t total = order.empty() ? size() : order.size();
  const std::size_t begin = index * batch_size;
  if (begin >= total)
    throw std::out_of_range(fmt::format("SNLI batch {} is past the end ({} batches)", index, batches(batch_size)));
  const std::size_t end = std::min(total, begin + batch_size);
  std::vector<std::uint32_t> ids;
  for (std::size_t i = begin; i < end; ++i) ids.push_back(order.empty() ? static_cast<std::uint32_t>(i) : order[i]);
  return make_batch(ids);
}

SnliBatch SnliDataset::make_batch(std::span<const std::uint32_t> example_ids) const {
  SnliBatch b;
  b.rows = example_ids.size();
  for (const std::uint32_t i : example_ids) {
    if (i >= size()) throw std::out_of_range(fmt::format("SNLI example {} of {}", i, size()));
    const SnliEncoded& e = examples_[i];
    b.premise_width = std::max(b.premise_width, e.premise.size());
    b.hypothesis_width = std::max(b.hypothesis_width, e.hypothesis.size());
    b.pair_width = std::max(b.pair_width, e.premise.size() + e.hypothesis.size() - 1);  // one [CLS] less
  }
  auto fill = [&](std::vector<std::int32_t>& ids, std::vector<std::uint8_t>& mask, std::size_t width) {
    ids.assign(b.rows * width, pad_id_);
    mask.assign(b.rows * width, 0);
  };
  fill(b.premise_ids, b.premise_mask, b.premise_width);
  fill(b.hypothesis_ids, b.hypothesis_mask, b.hypothesis_width);
  fill(b.pair_ids, b.pair_mask, b.pair_width);
  b.pair_type_ids.assign(b.rows * b.pair_width, 0);
  for (std::size_t r = 0; r < b.rows; ++r) {
    const SnliEncoded& e = examples_[example_ids[r]];
    b.labels.push_back(e.label);
    auto put = [&](const std::vector<std::int32_t>& src, std::vector<std::int32_t>& ids, std::vector<std::uint8_t>& mask,
                   std::size_t width, std::size_t offset, std::size_t skip) {
      for (std::size_t t = skip; t < src.size(); ++t) {
        ids[r * width + offset + t - skip] = src[t];
        mask[r * width + offset + t - skip] = 1;
      }
    };
    put(e.premise, b.premise_ids, b.premise_mask, b.premise_width, 0, 0);
    put(e.hypothesis, b.hypothesis_ids, b.hypothesis_mask, b.hypothesis_width, 0, 0);
    b.premise_lengths.push_back(static_cast<std::int32_t>(e.premise.size()));
    b.hypothesis_lengths.push_back(static_cast<std::int32_t>(e.hypothesis.size()));
    // [CLS] premise [SEP] + hypothesis [SEP] (the hypothesis without its own [CLS])
    put(e.premise, b.pair_ids, b.pair_mask, b.pair_width, 0, 0);
    put(e.hypothesis, b.pair_ids, b.pair_mask, b.pair_width, e.premise.size(), 1);
    const std::size_t pair_length = e.premise.size() + e.hypothesis.size() - 1;
    for (std::size_t t = e.premise.size(); t < pair_length; ++t) b.pair_type_ids[r * b.pair_width + t] = 1;
    b.pair_lengths.push_back(static_cast<std::int32_t>(pair_length));
  }
  return b;
}

}  // namespace wedge::data
