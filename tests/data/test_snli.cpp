// SNLI reading (jsonl and tab-separated), its errors, and the padded batches in both
// forms, on files the tests write; then the published row and label counts of the real
// dev and test splits when the data is present.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/snli.h"
#include "scratch.h"

using namespace wedge::data;
using wedge::testing::ScratchDir;
using wedge::testing::write_file;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<std::int32_t>;

const fs::path kSharedData = WEDGE_SHARED_DATA;


const std::string kJsonl =
    R"({"annotator_labels": ["neutral"], "captionID": "c1", "gold_label": "neutral", "pairID": "p1", "sentence1": "A man plays.", "sentence2": "A man plays a guitar."})"
    "\n"
    R"({"gold_label": "entailment", "sentence1": "Two dogs run.", "sentence2": "Dogs run."})"
    "\n"
    "\n"
    R"({"gold_label": "-", "sentence1": "A cat.", "sentence2": "A dog."})"
    "\n"
    R"({"gold_label": "contradiction", "sentence1": "A man sleeps.", "sentence2": "A man plays."})"
    "\n";

const std::string kTsv =
    "gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\t"
    "sentence2\tcaptionID\tpairID\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\r\n"
    "neutral\t( A man )\t( A man )\t(ROOT)\t(ROOT)\tA man plays.\tA man plays a guitar.\tc1\tp1\tneutral\t\t\t\t\r\n"
    "entailment\t-\t-\t-\t-\tTwo dogs run.\tDogs run.\tc2\tp2\tentailment\r\n"
    "-\t-\t-\t-\t-\tA cat.\tA dog.\tc3\tp3\tneutral\tentailment\r\n"
    "contradiction\t-\t-\t-\t-\tA man sleeps.\tA man plays.\tc4\tp4\tcontradiction\r\n";

SnliFile parse(const std::string& text, SnliFormat format, const std::string& name = "mem.jsonl") {
  std::istringstream in(text);
  return parse_snli(in, name, format);
}

Tokenizer toy_tokenizer() {
  return Tokenizer(Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",  // 0-4
                                       "a", "man", "plays", "guitar", ".",              // 5-9
                                       "two", "dogs", "run", "sleeps"}));               // 10-13
}

}  // namespace

TEST_CASE("jsonl rows: labels 0/1/2, '-' dropped and counted") {
  const SnliFile f = parse(kJsonl, SnliFormat::kJsonl);
  CHECK(f.rows == 4);
  CHECK(f.unlabelled == 1);
  REQUIRE(f.examples.size() == 3);
  CHECK(f.label_counts == std::array<std::size_t, 3>{1, 1, 1});
  CHECK(f.examples[0].label == static_cast<int>(NliLabel::kNeutral));
  CHECK(f.examples[1].label == static_cast<int>(NliLabel::kEntailment));
  CHECK(f.examples[2].label == static_cast<int>(NliLabel::kContradiction));
  CHECK(f.examples[0].premise == "A man plays.");
  CHECK(f.examples[0].hypothesis == "A man plays a guitar.");
  CHECK(f.examples[2].line == 5);
}

TEST_CASE("the tab-separated release reads the same pairs") {
  const SnliFile j = parse(kJsonl, SnliFormat::kJsonl);
  const SnliFile t = parse(kTsv, SnliFormat::kTsv, "mem.txt");
  CHECK(t.rows == 4);
  CHECK(t.unlabelled == 1);
  REQUIRE(t.examples.size() == j.examples.size());
  for (std::size_t i = 0; i < t.examples.size(); ++i) {
    CHECK(t.examples[i].premise == j.examples[i].premise);
    CHECK(t.examples[i].hypothesis == j.examples[i].hypothesis);
    CHECK(t.examples[i].label == j.examples[i].label);
  }
}

TEST_CASE("bad rows are errors naming file:line") {
  const std::string good = R"({"gold_label": "neutral", "sentence1": "a", "sentence2": "b"})";
  CHECK_THROWS_WITH_AS(parse(good + "\n" + good + "\n{\"gold_label\": \"neutral\",\n", SnliFormat::kJsonl, "x.jsonl"),
                       doctest::Contains("x.jsonl:3: malformed JSON"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse(good + "\n" + R"({"gold_label": "maybe", "sentence1": "a", "sentence2": "b"})",
                             SnliFormat::kJsonl, "x.jsonl"),
                       doctest::Contains("x.jsonl:2: unknown gold_label 'maybe'"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse(R"({"gold_label": "neutral", "sentence1": "a"})", SnliFormat::kJsonl, "x.jsonl"),
                       doctest::Contains("x.jsonl:1: the row has no \"sentence2\""), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse(R"({"gold_label": 1, "sentence1": "a", "sentence2": "b"})", SnliFormat::kJsonl, "x.jsonl"),
                       doctest::Contains("not a string"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse("[1, 2]", SnliFormat::kJsonl, "x.jsonl"), doctest::Contains("x.jsonl:1"),
                       std::runtime_error);
  // Not UTF-8: the published files are, so the row is damaged; the message says where.
  CHECK_THROWS_WITH_AS(parse(good + "\n{\"gold_label\": \"neutral\", \"sentence1\": \"caf\xe9\", \"sentence2\": \"b\"}",
                             SnliFormat::kJsonl, "x.jsonl"),
                       doctest::Contains("x.jsonl:2: not valid UTF-8 (byte 0xe9 at column 44)"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse("gold_label\tsentence1\tsentence2\nneutral\ta\tb\nneutral\t\xff\xfe\tb\n", SnliFormat::kTsv,
                             "u.txt"),
                       doctest::Contains("u.txt:3: not valid UTF-8 (byte 0xff at column 9)"), std::runtime_error);
  // a label with a terminal escape is shown escaped
  try {
    (void)parse(R"({"gold_label": "\u001b[2Jgone", "sentence1": "a", "sentence2": "b"})", SnliFormat::kJsonl, "e.jsonl");
    FAIL("an unknown label was accepted");
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    CHECK(message.find("e.jsonl:1: unknown gold_label '\\x1b[2Jgone'") != std::string::npos);
    CHECK(message.find('\x1b') == std::string::npos);
  }
  // so is the JSON parser's own quote of a bad line
  try {
    (void)parse("{\"gold_label\": \x1b[2J}", SnliFormat::kJsonl, "j.jsonl");
    FAIL("malformed JSON was accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).starts_with("j.jsonl:1: malformed JSON"));
    CHECK(std::string(e.what()).find('\x1b') == std::string::npos);
  }
  CHECK_THROWS_WITH_AS(parse("", SnliFormat::kJsonl, "empty.jsonl"), doctest::Contains("empty.jsonl: no SNLI rows"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(parse("\n\n", SnliFormat::kTsv, "blank.txt"), doctest::Contains("no SNLI rows"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(parse("label\tsentence1\tsentence2\n", SnliFormat::kTsv, "h.txt"),
                       doctest::Contains("h.txt:1: the header has no 'gold_label'"), std::runtime_error);
  CHECK_THROWS_WITH_AS(parse("gold_label\tsentence1\tsentence2\nneutral\tonly one\n", SnliFormat::kTsv, "c.txt"),
                       doctest::Contains("c.txt:2: expected 3"), std::runtime_error);
}

TEST_CASE("finding split files, and clear errors for absent ones") {
  ScratchDir dir("find");
  write_file(dir.path / "snli_1.0" / "snli_1.0_dev.jsonl", kJsonl);
  write_file(dir.path / "snli_1.0_test.txt", kTsv);
  CHECK(find_snli_file(dir.path, "dev") == dir.path / "snli_1.0" / "snli_1.0_dev.jsonl");
  CHECK(find_snli_file(dir.path, "test") == dir.path / "snli_1.0_test.txt");
  CHECK_FALSE(find_snli_file(dir.path, "train"));
  CHECK(load_snli_split(dir.path, "test").examples.size() == 3);
  CHECK_THROWS_WITH_AS(load_snli_split(dir.path, "train"), doctest::Contains("snli_1.0_train.jsonl"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(load_snli_split(dir.path, "train"), doctest::Contains("download_data.sh"), std::runtime_error);
  CHECK_THROWS_WITH_AS(load_snli_split(dir.path / "absent", "dev"), doctest::Contains("SNLI folder not found"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(read_snli_file(dir.path / "nothing.jsonl"), doctest::Contains("nothing.jsonl"),
                       std::runtime_error);
  CHECK_THROWS_AS(load_snli_split(dir.path, "validation"), std::invalid_argument);
}

TEST_CASE("batches: two padded sentences and one pair sequence") {
  const SnliFile f = parse(kJsonl, SnliFormat::kJsonl);
  const Tokenizer t = toy_tokenizer();
  SnliOptions options;
  options.max_length = 6;
  const SnliDataset ds(f, t, options);
  REQUIRE(ds.size() == 3);
  // "A man plays a guitar." is 6 tokens: with [CLS] and [SEP] cut to 6
  CHECK(ds[0].premise == Ids{2, 5, 6, 7, 9, 3});
  CHECK(ds[0].hypothesis == Ids{2, 5, 6, 7, 5, 3});
  CHECK(ds[0].truncated);
  CHECK_FALSE(ds[1].truncated);
  CHECK(ds.truncated_count() == 1);

  const SnliBatch b = ds.batch({}, 0, 2);  // file order: examples 0 and 1
  CHECK(b.rows == 2);
  CHECK(b.labels == Ids{1, 0});
  CHECK(b.premise_width == 6);
  CHECK(b.premise_ids == Ids{2, 5, 6, 7, 9, 3, /**/ 2, 10, 11, 12, 9, 3});
  CHECK(b.hypothesis_width == 6);
  CHECK(b.hypothesis_ids == Ids{2, 5, 6, 7, 5, 3, /**/ 2, 11, 12, 9, 3, 0});
  CHECK(b.hypothesis_mask == std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 1, 0});
  CHECK(b.hypothesis_lengths == Ids{6, 5});
  CHECK(b.pair_width == 11);
  CHECK(b.pair_ids == Ids{2, 5, 6, 7, 9, 3, 5, 6, 7, 5, 3, /**/ 2, 10, 11, 12, 9, 3, 11, 12, 9, 3, 0});
  CHECK(b.pair_type_ids == Ids{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, /**/ 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0});
  CHECK(b.pair_mask == std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0});
  CHECK(b.pair_lengths == Ids{11, 10});

  const SnliBatch last = ds.batch({}, 1, 2);
  CHECK(last.rows == 1);
  CHECK(last.labels == Ids{2});
  CHECK_THROWS_AS(ds.batch({}, 2, 2), std::out_of_range);

  const auto order = ds.epoch_order(3, 1);
  CHECK(order == ds.epoch_order(3, 1));
  CHECK(std::set<std::uint32_t>(order.begin(), order.end()) == std::set<std::uint32_t>{0, 1, 2});
  const SnliBatch shuffled = ds.batch(order, 0, 3);
  for (std::size_t r = 0; r < 3; ++r) CHECK(shuffled.labels[r] == ds[order[r]].label);

  CHECK_THROWS_AS(SnliDataset(f, Tokenizer(Vocab::from_tokens({"[UNK]", "a"}))), std::runtime_error);
}

TEST_CASE("real SNLI: row and label counts of dev and test") {
  const fs::path dir = kSharedData / "snli";
  const fs::path vocab = kSharedData / "bert-base-uncased-vocab.txt";
  if (!fs::exists(dir / "snli_1.0_dev.jsonl") || !fs::exists(dir / "snli_1.0_test.jsonl") || !fs::exists(vocab)) {
    MESSAGE("skipped: SNLI or the BERT vocabulary not found under " << kSharedData.string());
    return;
  }
  const SnliFile dev = load_snli_split(dir, "dev");
  CHECK(dev.rows == 10000);
  CHECK(dev.examples.size() == 9842);
  CHECK(dev.unlabelled == 158);
  CHECK(dev.label_counts == std::array<std::size_t, 3>{3329, 3235, 3278});
  const SnliFile test = load_snli_split(dir, "test");
  CHECK(test.rows == 10000);
  CHECK(test.examples.size() == 9824);
  CHECK(test.label_counts == std::array<std::size_t, 3>{3368, 3219, 3237});
  CHECK_FALSE(find_snli_file(dir, "train"));  // only a 1 % sample is stored, under partial/
  if (fs::exists(dir / "partial" / "snli_1.0_train_random1pct.jsonl")) {
    const SnliFile sample = read_snli_file(dir / "partial" / "snli_1.0_train_random1pct.jsonl");
    CHECK(sample.rows == 5502);
    CHECK(sample.unlabelled == 4);
  }

  const SnliDataset ds(dev, Tokenizer::from_file(vocab));
  const SnliBatch all = ds.batch({}, 0, ds.size());
  CHECK(all.premise_width <= 48);
  CHECK(all.hypothesis_width <= 48);
  CHECK(all.pair_width <= 95);
  // "Two women are embracing while holding to go packages." is the first dev premise
  CHECK(std::vector<std::int32_t>(all.premise_ids.begin(), all.premise_ids.begin() + 12) ==
        Ids{101, 2048, 2308, 2024, 23581, 2096, 3173, 2000, 2175, 14555, 1012, 102});
}
