// The WordPiece tokenizer: greedy longest match, [UNK] rules, special tokens, pairs,
// truncation, decoding and vocabulary files on small hand-made vocabularies; then ids
// from the reference (Hugging Face tokenizers, bert-base-uncased) on hard Unicode cases.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "data/tokenizer.h"

using namespace wedge::data;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<std::int32_t>;
using Tokens = std::vector<std::string>;

const fs::path kSharedData = WEDGE_SHARED_DATA;

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("wedge-test-data-" + name + "-" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A made-up vocabulary whose greedy cuts can be worked out by hand.
Tokenizer toy_tokenizer(TokenizerOptions options = {}) {
  return Tokenizer(Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",    // 0-4
                                       "un", "##aff", "##able", "unaff", "##a",           // 5-9
                                       "##ble", "want", "##ed", "runn", "##ing",         // 10-14
                                       ",", ".", "!", "a", "ab",                         // 15-19
                                       "##b", "##bc", "hello", "world", "##s", "x", "'"}),  // 20-26
                   options);
}

}  // namespace

TEST_CASE("WordPiece takes the longest piece first") {
  const Tokenizer t = toy_tokenizer();
  CHECK(t.tokenize("unaffable") == Tokens{"unaff", "##able"});  // not un ##aff ##able
  CHECK(t.tokenize("wanted running") == Tokens{"want", "##ed", "runn", "##ing"});
  CHECK(t.tokenize("Hellos, WORLD!") == Tokens{"hello", "##s", ",", "world", "!"});
  CHECK(t.encode("hello world") == Ids{22, 23});
}

TEST_CASE("a word with no complete cut is one [UNK]") {
  const Tokenizer t = toy_tokenizer();
  // greedy takes "ab", then nothing matches "c": the whole word is unknown, although a ##bc
  // would have covered it — WordPiece does not backtrack
  CHECK(t.tokenize("abc") == Tokens{"[UNK]"});
  CHECK(t.tokenize("xyz hello") == Tokens{"[UNK]", "hello"});
  CHECK(t.tokenize("\u4f60\u597d") == Tokens{"[UNK]", "[UNK]"});  // two one-character words
}

TEST_CASE("a word over 100 characters is [UNK]") {
  const Tokenizer t = toy_tokenizer();
  const std::string hundred = "a" + std::string(99, 'b');
  const Ids ids = t.encode(hundred);
  REQUIRE(ids.size() == 99);  // ab + 98 × ##b
  CHECK(ids.front() == 19);
  CHECK(ids.back() == 20);
  CHECK(t.encode(hundred + "b") == Ids{1});
  // characters, not bytes: 100 two-byte characters are still one word within the limit
  TokenizerOptions small;
  small.max_input_chars_per_word = 3;
  CHECK(toy_tokenizer(small).encode("abb abbb") == Ids{19, 20, 1});
}

TEST_CASE("special tokens written in the text are matched exactly") {
  const Tokenizer t = toy_tokenizer();
  CHECK(t.encode("[CLS]hello[SEP] x") == Ids{2, 22, 3, 25});
  CHECK(t.encode("a[MASK]b") == Ids{18, 4, 1});
  CHECK(t.encode("[cls]") == Ids{1, 1, 1});  // lower case is ordinary text: [ cls ]
  CHECK(t.encode("[CLS") == Ids{1, 1});
  TokenizerOptions off;
  off.match_special_tokens = false;
  CHECK(toy_tokenizer(off).encode("[SEP]") == Ids{1, 1, 1});
}

TEST_CASE("single and pair encodings with segment ids") {
  const Tokenizer t = toy_tokenizer();
  const Encoding one = t.encode_single("hello world");
  CHECK(one.ids == Ids{2, 22, 23, 3});
  CHECK(one.type_ids == Ids{0, 0, 0, 0});
  CHECK(t.encode_single("hello world x", 4).ids == Ids{2, 22, 23, 3});
  CHECK(t.encode_single("hello", 2).ids == Ids{2, 3});
  CHECK_THROWS_AS(t.encode_single("hello", 1), std::invalid_argument);

  const Encoding pair = t.encode_pair("hello world", "x");
  CHECK(pair.ids == Ids{2, 22, 23, 3, 25, 3});
  CHECK(pair.type_ids == Ids{0, 0, 0, 0, 1, 1});
  const Encoding cut = t.encode_pair("hello world hello world", "x x x", 8);  // 4 + 3 > 5
  // budget 5 for 4 + 3 tokens: both are cut, the longer first sentence keeps the odd token
  CHECK(cut.ids == Ids{2, 22, 23, 22, 3, 25, 25, 3});
  CHECK(cut.type_ids == Ids{0, 0, 0, 0, 0, 1, 1, 1});

  const std::vector<std::string> texts = {"hello", "world x", "", "unaffable wanted"};
  const auto batch = t.encode_batch(texts, 0, 2);
  REQUIRE(batch.size() == texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) CHECK(batch[i].ids == t.encode_single(texts[i]).ids);
  const std::vector<std::pair<std::string, std::string>> pairs = {{"hello", "world"}, {"x", ""}};
  const auto pair_batch = t.encode_pair_batch(pairs, 5, 2);
  CHECK(pair_batch[0].ids == t.encode_pair("hello", "world", 5).ids);
  CHECK(pair_batch[1].ids == Ids{2, 25, 3, 3});
}

TEST_CASE("longest-first truncation keeps the reference's lengths") {
  // (length a, length b) → kept, budget 7: the table of the reference library's own tests
  struct Case {
    std::size_t a, b, keep_a, keep_b;
  };
  const Case cases[] = {{0, 0, 0, 0}, {0, 2, 0, 2}, {0, 4, 0, 4}, {0, 8, 0, 7}, {2, 0, 2, 0}, {2, 2, 2, 2},
                        {2, 4, 2, 4}, {2, 8, 2, 5}, {4, 0, 4, 0}, {4, 2, 4, 2}, {4, 4, 3, 4}, {4, 8, 3, 4},
                        {8, 0, 7, 0}, {8, 2, 5, 2}, {8, 4, 4, 3}, {8, 8, 3, 4}};
  for (const Case& c : cases) {
    CAPTURE(c.a);
    CAPTURE(c.b);
    const auto [a, b] = truncate_pair_longest_first(c.a, c.b, 7);
    CHECK(a == c.keep_a);
    CHECK(b == c.keep_b);
  }
  CHECK(truncate_pair_longest_first(10, 7, 1) == std::pair<std::size_t, std::size_t>{1, 0});
  CHECK(truncate_pair_longest_first(3, 9, 0) == std::pair<std::size_t, std::size_t>{0, 0});
}

TEST_CASE("decode glues ## pieces and tidies punctuation") {
  const Tokenizer t = toy_tokenizer();
  CHECK(t.decode(Ids{2, 8, 7, 22, 24, 15, 23, 17, 3}) == "[CLS] unaffable hellos, world! [SEP]");
  CHECK(t.decode(Ids{2, 8, 7, 22, 24, 15, 23, 17, 3}, {.skip_special_tokens = true}) == "unaffable hellos, world!");
  CHECK(t.decode(Ids{22, 16}, {.cleanup = false}) == "hello .");
  CHECK(t.decode(Ids{24, 22}) == "##s hello");  // a leading piece keeps its prefix
  CHECK(t.decode(Ids{22, 26, 24}) == "hello 's");
  CHECK(t.decode(Ids{}).empty());
  CHECK_THROWS_AS(t.decode(Ids{99}), std::out_of_range);
}

TEST_CASE("vocab.txt: ids are line numbers, specials by name, bad files are clear errors") {
  const fs::path dir = scratch_dir("vocab");
  write_file(dir / "crlf.txt", "[PAD]\r\n[UNK]\r\nhello  \r\n##s\r\n");
  const Vocab v = Vocab::load(dir / "crlf.txt");
  CHECK(v.size() == 4);
  CHECK(v.find("hello") == 2);  // trailing whitespace and \r are not part of the token
  CHECK(v.unk_id() == 1);
  CHECK(v.pad_id() == 0);
  CHECK(v.cls_id() == -1);
  CHECK(Tokenizer(v).encode("hellos") == Ids{2, 3});

  write_file(dir / "no_unk.txt", "[PAD]\nhello\n");
  const Vocab no_unk = Vocab::load(dir / "no_unk.txt");
  CHECK_THROWS_WITH_AS(Tokenizer{no_unk}, doctest::Contains("has no [UNK] token"), std::runtime_error);

  write_file(dir / "empty.txt", "");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "empty.txt"), doctest::Contains("empty"), std::runtime_error);
  write_file(dir / "latin1.txt", "[UNK]\ncaf\xe9\n");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "latin1.txt"), doctest::Contains("latin1.txt:2"), std::runtime_error);
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "missing.txt"), doctest::Contains("download_data.sh"), std::runtime_error);

  v.save(dir / "saved.txt");
  CHECK(Vocab::load(dir / "saved.txt").tokens() == v.tokens());
  CHECK(Vocab::load(dir / "saved.txt").content_hash() == v.content_hash());
  CHECK(Vocab::from_tokens({"a", "b"}).content_hash() != Vocab::from_tokens({"ab"}).content_hash());
  fs::remove_all(dir);
}

TEST_CASE("vocab.txt: a repeated token or an empty line is an error naming the lines") {
  const fs::path dir = scratch_dir("vocab-dup");
  // The second "a" would take id 4 and leave id 2 unreachable: every id after it would differ
  // from what a model trained with the file meant.
  write_file(dir / "dup.txt", "[PAD]\n[UNK]\na\nb\na\nc\n");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "dup.txt"),
                       doctest::Contains("dup.txt:5: the token \"a\" is also on line 3"), std::runtime_error);
  // the same token once trailing whitespace is trimmed
  write_file(dir / "dup_space.txt", "[UNK]\nhello\r\nx\nhello \t\n");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "dup_space.txt"),
                       doctest::Contains("dup_space.txt:4: the token \"hello\" is also on line 2"), std::runtime_error);
  // a token with a terminal escape in it is shown escaped
  write_file(dir / "dup_escape.txt", "[UNK]\n\x1b[2Jx\n\x1b[2Jx\n");
  try {
    (void)Vocab::load(dir / "dup_escape.txt");
    FAIL("a repeated token was accepted");
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    CHECK(message.find("dup_escape.txt:3: the token \"\\x1b[2Jx\" is also on line 2") != std::string::npos);
    CHECK(message.find('\x1b') == std::string::npos);
  }
  // in memory too
  CHECK_THROWS_WITH_AS(Vocab::from_tokens({"[UNK]", "x", "x"}), doctest::Contains("\"x\" has ids 1 and 2"),
                       std::invalid_argument);

  write_file(dir / "blank.txt", "[PAD]\n[UNK]\n\nhello\n");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "blank.txt"), doctest::Contains("blank.txt:3: empty line"), std::runtime_error);
  write_file(dir / "spaces.txt", "[UNK]\n   \t\n");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "spaces.txt"), doctest::Contains("spaces.txt:2: empty line"), std::runtime_error);
  write_file(dir / "trailing_blank.txt", "[UNK]\nhello\n\n");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "trailing_blank.txt"), doctest::Contains("trailing_blank.txt:3: empty line"),
                       std::runtime_error);

  fs::create_directories(dir / "folder.txt");
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "folder.txt"), doctest::Contains("is a folder"), std::runtime_error);
  write_file(dir / "junk.bin", std::string("\x00\x01\xff\xfe\x80\n", 6));
  CHECK_THROWS_WITH_AS(Vocab::load(dir / "junk.bin"), doctest::Contains("junk.bin:1: the vocabulary line is not valid UTF-8 (\\x00\\x01\\xff\\xfe\\x80)"),
                       std::runtime_error);
  fs::remove_all(dir);
}

TEST_CASE("the BERT-uncased vocabulary has no repeated token and no empty line") {
  const fs::path vocab_file = kSharedData / "bert-base-uncased-vocab.txt";
  if (!fs::exists(vocab_file)) {
    MESSAGE("skipped: " << vocab_file.string() << " not found");
    return;
  }
  const Vocab v = Vocab::load(vocab_file);  // would throw on either
  CHECK(v.size() == 30522);
  std::set<std::string> distinct(v.tokens().begin(), v.tokens().end());
  CHECK(distinct.size() == 30522);
  CHECK(distinct.count("") == 0);
  CHECK(v.token(100) == "[UNK]");
}

TEST_CASE("a vocabulary that cannot be written leaves no temporary file behind") {
  const fs::path dir = scratch_dir("vocab-save");
  const Vocab v = Vocab::from_tokens({"[PAD]", "[UNK]", "hello"});
  // the target is a folder that is not empty: the rename onto it fails after the writes
  fs::create_directories(dir / "taken" / "inside");
  CHECK_THROWS_WITH_AS(v.save(dir / "taken"), doctest::Contains("taken"), std::runtime_error);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  CHECK(left == std::vector<std::string>{"taken"});
  // the folder does not exist: nothing is created
  CHECK_THROWS_AS(v.save(dir / "absent" / "vocab.txt"), std::runtime_error);
  CHECK_FALSE(fs::exists(dir / "absent"));
  // a token the format cannot hold
  CHECK_THROWS_WITH_AS(Vocab::from_tokens({"[UNK]", "a\nb"}).save(dir / "v.txt"), doctest::Contains("line break"),
                       std::runtime_error);
  CHECK_FALSE(fs::exists(dir / "v.txt"));
  fs::remove_all(dir);
}

TEST_CASE("bert-base-uncased: known cases and hard Unicode, ids as the reference gives them") {
  const fs::path vocab_file = kSharedData / "bert-base-uncased-vocab.txt";
  if (!fs::exists(vocab_file)) {
    MESSAGE("skipped: " << vocab_file.string() << " not found");
    return;
  }
  const Tokenizer bert = Tokenizer::from_file(vocab_file);
  REQUIRE(bert.vocab().size() == 30522);
  CHECK(bert.vocab().pad_id() == 0);
  CHECK(bert.vocab().unk_id() == 100);
  CHECK(bert.vocab().cls_id() == 101);
  CHECK(bert.vocab().sep_id() == 102);
  CHECK(bert.vocab().mask_id() == 103);

  CHECK(bert.tokenize("unaffable") == Tokens{"una", "##ffa", "##ble"});
  CHECK(bert.encode("unaffable") == Ids{14477, 20961, 3468});
  CHECK(bert.tokenize("H\u00e9llo, W\u00f6rld!") == Tokens{"hello", ",", "world", "!"});
  CHECK(bert.tokenize("\u4e2d\u56fd") == Tokens{"\u4e2d", "\u56fd"});
  CHECK(bert.tokenize("\u4f60\u597d") == Tokens{"[UNK]", "[UNK]"});
  CHECK(bert.decode(bert.encode_pair("The cat sat.", "A cat!").ids, {.skip_special_tokens = true}) ==
        "the cat sat. a cat!");

  // Generated once with the reference (tokenizers 0.23, bert-base-uncased, no special tokens added).
  const std::vector<std::pair<std::string, Ids>> cases = {
    {std::string("unaffable", 9), {14477, 20961, 3468}},
    {std::string("H\u00e9llo, W\u00f6rld!", 15), {7592, 1010, 2088, 999}},
    {std::string("\u4e2d\u56fd", 6), {1746, 1799}},
    {std::string("\u4f60\u597d", 6), {100, 100}},
    {std::string("\u0130stanbul \u0131l\u0131k", 16), {9960, 1104, 2140, 11722, 2243}},
    {std::string("\u01c5emal \u01c8 \u01ca", 12), {100, 100, 100}},
    {std::string("\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 \u1f40\u03b4\u03c5\u03c3\u03c3\u03b5\u03cd\u03c2 \u1f88", 36), {1173, 18199, 29733, 29735, 29736, 29730, 29733, 1169, 29722, 29735, 29733, 29733, 29723, 29735, 19579, 1155}},
    {std::string("stra\u00dfe STRASSE \u1e9e", 19), {2358, 27807, 2358, 8180, 3366, 1096}},
    {std::string("\u00c5ngstr\u00f6m \u00c5 K", 15), {17076, 15687, 1037, 1047}},
    {std::string("na\u00efve caf\u00e9 r\u00e9sum\u00e9 Dvo\u0159\u00e1k Nguy\u1ec5n \u0110\u00e0 N\u1eb5ng", 51), {15743, 7668, 13746, 1040, 14550, 4817, 16577, 1102, 2050, 16660, 2290}},
    {std::string("\ufb01ne \ufb02ow \ufb03", 15), {1984, 2638, 1985, 5004, 100}},
    {std::string("\uff11\uff12\uff13 \uff21\uff22\uff23 \uff41\uff42\uff43", 29), {100, 100, 100}},
    {std::string("e\u0301 a\u0323\u0302 \u1ead q\u0307\u0323", 19), {1041, 1037, 1037, 1053}},
    {std::string("\U0001f44d\U0001f3fd family \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f", 41), {100, 2155, 100, 100}},
    {std::string("a\u200bb soft\u00adhyphen", 18), {11113, 3730, 10536, 8458, 2368}},
    {std::string("tab" "\x09" "new" "\x0a" "line" "\x0d" "\x0a" "end" "\x0b" "v" "\x0c" "f", 21), {21628, 2047, 2240, 2203, 2615, 2546}},
    {std::string("a\u00a0b\u3000c\u2028d\u2029e\u202ff", 20), {1037, 1038, 1039, 1040, 1041, 1042}},
    {std::string("\x07" "bell" "\x00" "nul" "\x7f" "del" "\xc2" "\x85" "nel", 18), {4330, 11231, 17920, 19666, 2884}},
    {std::string("\ufeffBOM x\ufffdy", 12), {8945, 2213, 1060, 2100}},
    {std::string("\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", 25), {1295, 17149, 29820, 29816, 25573, 1271, 25573, 23673, 29830, 25573, 23673, 22192}},
    {std::string("\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd", 14), {1266, 29799, 29792, 29800}},
    {std::string("\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", 37), {1327, 29867, 29874, 29859, 1325, 29863, 29877, 29868, 29876}},
    {std::string("\u3053\u3093\u306b\u3061\u306f \u30ab\u30bf\u30ab\u30ca \uff76\uff80\uff76\uff85", 41), {1655, 30217, 30194, 30188, 30198, 1700, 30235, 30226, 30241, 100}},
    {std::string("\ud55c\uad6d\uc5b4 \uc870\uc120\ub9d0", 19), {1469, 30006, 30021, 29991, 30014, 30020, 29999, 30008, 1464, 30011, 29997, 30008, 30021, 29995, 30006, 30022}},
    {std::string("\u6f22\u5b57 \U00020000 \U0002a700 \U0002b820 \U0002b920 \u8c48 \u4e3d", 34), {1904, 100, 100, 100, 100, 100, 100, 100}},
    {std::string("\u00bfQu\u00e9? \u00a1S\u00ed! \u00abguillemets\u00bb \u201elow\u201c", 39), {1094, 10861, 1029, 1067, 9033, 999, 1077, 26458, 6216, 11368, 2015, 1090, 1525, 2659, 1523}},
    {std::string("\u201cquotes\u201d \u2018single\u2019 \u2014 dash \u2013 en \u2026 ellipsis \u00b7 dot", 61), {1523, 16614, 1524, 1520, 2309, 1521, 1517, 11454, 1516, 4372, 1529, 3449, 15000, 6190, 1087, 11089}},
    {std::string("$100 + 50% = ^_^ `~|<> #tag @user", 33), {1002, 2531, 1009, 2753, 1003, 1027, 1034, 1035, 1034, 1036, 1066, 1064, 1026, 1028, 1001, 6415, 1030, 5310}},
    {std::string("[CLS] hello [SEP] world [SEP]", 29), {101, 7592, 102, 2088, 102}},
    {std::string("a[MASK]b [mask] [UNK] [PAD]", 27), {1037, 103, 1038, 1031, 7308, 1033, 100, 0}},
    {std::string("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", 202), {22038, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 20348, 100}},
    {std::string("1 @,@ 000 km @-@ long 3 @.@ 5", 29), {1015, 1030, 1010, 1030, 2199, 2463, 1030, 1011, 1030, 2146, 1017, 1030, 1012, 1030, 1019}},
    {std::string("don't won't I'm you're", 22), {2123, 1005, 1056, 2180, 1005, 1056, 1045, 1005, 1049, 2017, 1005, 2128}},
    {std::string("\u2103 \u2109 \u2116 \u2122 \u216b x\u00b2 \u00b5 \u01f0", 29), {100, 100, 1578, 1580, 100, 1060, 10701, 1085, 1046}},
    {std::string("\u00c5\u00c9\u00ce\u00d5\u00dc \u00e0\u00e9\u00ee\u00f5\u00fc", 21), {29347, 3695, 2226, 29347, 3695, 2226}},
    {std::string("\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0423\u043a\u0440\u0430\u0457\u043d\u0441\u044c\u043a\u0430 \u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u0540\u0561\u0575\u0565\u0580\u0565\u0576", 89), {1159, 29727, 29727, 24824, 16177, 18199, 29726, 14608, 1195, 29748, 29747, 29747, 23925, 15414, 1198, 23925, 16856, 10260, 29760, 18947, 29747, 23742, 28598, 100, 1228, 29766, 29777, 29770, 29784, 29770, 29778}},
    {std::string("\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e9e\u0eb2\u0eaa\u0eb2\u0ea5\u0eb2\u0ea7", 43), {100, 100}},
    {std::string("\U0001d401\U0001d428\U0001d425\U0001d41d \U0001d56f\U0001d594\U0001d59a\U0001d587\U0001d591\U0001d58a", 41), {100, 100}},
    {std::string("\u03a9mega ohm \u03a9", 13), {1179, 4168, 3654, 2821, 2213, 1179}},
    {std::string("The 1990s' \"best\" album (1991) -- see p. 42.", 44), {1996, 4134, 1005, 1000, 2190, 1000, 2201, 1006, 2889, 1007, 1011, 1011, 2156, 1052, 1012, 4413, 1012}},
    {std::string("e-mail co-operate re-enter", 26), {1041, 1011, 5653, 2522, 1011, 5452, 2128, 1011, 4607}},
    {std::string("C++ & C# vs. F#", 15), {1039, 1009, 1009, 1004, 1039, 1001, 5443, 1012, 1042, 1001}},
    {std::string("\u0345\u0300 starts with marks", 22), {4627, 2007, 6017}},
    {std::string("\u0d4d\u0bcd virama", 13), {6819, 14672}},
    {std::string("\u1734 \u166d \u111c9 \u061d \u1c89", 19), {100, 100, 100, 100}},
  };
  for (const auto& [text, ids] : cases) {
    CAPTURE(text);
    CHECK(bert.encode(text) == ids);
  }
}
