// The data commands of the `wedge` binary, run as a user would: tokenize (arguments, stdin,
// --json), vocab train, data stats, and the "error: ..." exit for bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shell.h"

namespace fs = std::filesystem;

namespace {

using Result = wedge::testing::ShellRun;

Result run(const std::string& arguments) { return wedge::testing::shell(std::string(WEDGE_CLI) + " " + arguments); }

struct ScratchDir {
  fs::path path;
  ScratchDir() : path(fs::temp_directory_path() / ("wedge-test-cli-data-" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

const char* kVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n,\nworld\n!\n##s\nthe\ncat\n";

}  // namespace

TEST_CASE("wedge tokenize: arguments, stdin lines and --json") {
  ScratchDir dir;
  const std::string vocab = dir.file("vocab.txt", kVocab);
  const Result args = run("tokenize --vocab " + vocab + " Hello, worlds!");
  CHECK(args.exit_code() == 0);
  CHECK(args.out == "ids:    5 6 7 9 8\ntokens: hello , world ##s !\n");

  const std::string input = dir.file("in.txt", "the cat\nHELLO dog\n");
  const Result json = run("tokenize --vocab " + vocab + " --json < " + input);
  CHECK(json.exit_code() == 0);
  std::istringstream lines(json.out);
  std::string line;
  std::vector<nlohmann::json> objects;
  while (std::getline(lines, line)) objects.push_back(nlohmann::json::parse(line));
  REQUIRE(objects.size() == 2);
  CHECK(objects[0]["ids"] == std::vector<int>{10, 11});
  CHECK(objects[0]["tokens"] == std::vector<std::string>{"the", "cat"});
  CHECK(objects[1]["ids"] == std::vector<int>{5, 1});
  CHECK(objects[1]["tokens"] == std::vector<std::string>{"hello", "[UNK]"});

  const Result special = run("tokenize --vocab " + vocab + " --special --json the cat");
  CHECK(nlohmann::json::parse(special.out)["ids"] == std::vector<int>{2, 10, 11, 3});
}

TEST_CASE("wedge tokenize and data stats fail with a clear error") {
  ScratchDir dir;
  const Result missing = run("tokenize --vocab " + (dir.path / "none.txt").string() + " x");
  CHECK(missing.exit_code() == 1);
  CHECK(missing.text().find("error: vocabulary file not found") != std::string::npos);
  const std::string no_unk = dir.file("no_unk.txt", "[PAD]\nhello\n");
  const Result bad_vocab = run("tokenize --vocab " + no_unk + " x");
  CHECK(bad_vocab.exit_code() == 1);
  CHECK(bad_vocab.text().find("[UNK]") != std::string::npos);
  const Result no_dir = run("data stats --data snli --data-dir " + (dir.path / "absent").string());
  CHECK(no_dir.exit_code() == 1);
  CHECK(no_dir.text().find("download_data.sh") != std::string::npos);
}

TEST_CASE("wedge vocab train writes a vocabulary the tokenizer can load") {
  ScratchDir dir;
  const std::string corpus = dir.file("corpus.txt", "low lower lowest\nnewer newest wider\nlow low new\n");
  const std::string out = (dir.path / "trained.txt").string();
  const Result r = run("vocab train --size 25 --out " + out + " " + corpus);
  CHECK(r.exit_code() == 0);
  CHECK(r.text().find("merges") != std::string::npos);  // progress lines
  CHECK(r.text().find("wrote " + out) != std::string::npos);
  std::ifstream in(out);
  std::vector<std::string> tokens;
  for (std::string t; std::getline(in, t);) tokens.push_back(t);
  REQUIRE(tokens.size() == 25);
  CHECK(tokens[1] == "[UNK]");
  const Result tok = run("tokenize --vocab " + out + " --json lowest newer");
  const auto ids = nlohmann::json::parse(tok.out)["ids"].get<std::vector<int>>();
  CHECK(std::find(ids.begin(), ids.end(), 1) == ids.end());  // no [UNK]
}

TEST_CASE("wedge data stats reports the splits it finds and names the missing ones") {
  ScratchDir dir;
  const std::string vocab = dir.file("vocab.txt", kVocab);
  dir.file("wt/wiki.train.raw", " = Hello = \n\n the cat \n");
  dir.file("wt/wiki.test.tokens", " the <unk> \n");
  const Result wt = run("data stats --data wikitext2 --no-cache --vocab " + vocab + " --data-dir " + (dir.path / "wt").string());
  CHECK(wt.exit_code() == 0);
  CHECK(wt.text().find("lines 3  bytes 23  tokens 5  [UNK] 2 (40.000%)") != std::string::npos);
  CHECK(wt.text().find("valid  missing") != std::string::npos);
  CHECK(wt.text().find("tokens 2  [UNK] 1 (50.000%)") != std::string::npos);

  dir.file("snli/snli_1.0_dev.jsonl",
           "{\"gold_label\": \"neutral\", \"sentence1\": \"the cat\", \"sentence2\": \"hello\"}\n"
           "{\"gold_label\": \"-\", \"sentence1\": \"the cat\", \"sentence2\": \"hello\"}\n");
  const Result snli = run("data stats --data snli --vocab " + vocab + " --data-dir " + (dir.path / "snli").string());
  CHECK(snli.exit_code() == 0);
  CHECK(snli.text().find("train  missing") != std::string::npos);
  CHECK(snli.text().find("rows 2  labelled 1  dropped '-' 1  entailment 0  neutral 1  contradiction 0") !=
        std::string::npos);
}

namespace {

// Status 1 and one `error:` line holding `expected`, the last line of standard error: the
// whole output for a command that fails before printing anything (`whole`).
void check_one_error_line(const Result& r, const std::string& expected, bool whole = true) {
  CAPTURE(r.text());
  CHECK(r.exit_code() == 1);
  CHECK(r.err.ends_with("\n"));
  const std::size_t last_line = r.err.rfind('\n', r.err.size() - 2) + 1;  // 0 when only one line
  CHECK(r.err.compare(last_line, 7, "error: ") == 0);
  CHECK(r.err.find(expected, last_line) != std::string::npos);
  const std::string all = "\n" + r.text();
  std::size_t error_lines = 0;
  for (std::size_t at = all.find("\nerror: "); at != std::string::npos; at = all.find("\nerror: ", at + 1)) ++error_lines;
  CHECK(error_lines == 1);
  if (whole) {
    CHECK(last_line == 0);
    CHECK(r.out.empty());
  }
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("numeric flags of tokenize, vocab train and data stats say which flag and what is allowed") {
  ScratchDir dir;
  const std::string vocab = dir.file("vocab.txt", kVocab);
  const std::string corpus = dir.file("corpus.txt", "low lower lowest\n");
  const std::string out = (dir.path / "v.txt").string();
  const std::string train = "vocab train --out " + out + " " + corpus;
  check_one_error_line(run(train + " --size -5"),
                       "--size: '-5' is not allowed: give a whole number from 6 to 2147483647");
  for (const char* bad : {"5", "3.5", "nan", "18446744073709551611"}) {
    CAPTURE(bad);
    check_one_error_line(run(train + " --size " + bad), "--size: '");
  }
  check_one_error_line(run(train + " --size 30 --min-pair-frequency 0"),
                       "--min-pair-frequency: '0' is not allowed: give a whole number, at least 1");
  check_one_error_line(run(train + " --size 30 --min-frequency -1"), "--min-frequency: '-1' is not allowed");
  CHECK_FALSE(fs::exists(out));

  check_one_error_line(run("tokenize --vocab " + vocab + " --max-length -1 x"),
                       "--max-length: '-1' is not allowed: give a whole number from 0 to 2147483647");
  check_one_error_line(run("tokenize --vocab " + vocab + " --special --max-length 1 x"),
                       "--max-length 1 leaves no room for [CLS] and [SEP] with --special");
  const Result cut = run("tokenize --vocab " + vocab + " --special --max-length 2 --json the cat");
  CHECK(cut.exit_code() == 0);
  CHECK(nlohmann::json::parse(cut.out)["ids"] == std::vector<int>{2, 3});

  const std::string snli = (dir.path / "snli").string();
  fs::create_directories(snli);
  check_one_error_line(run("data stats --data snli --data-dir " + snli + " --vocab " + vocab + " --max-length 1"),
                       "--max-length: '1' is not allowed: give a whole number from 2 to 2147483647");
  check_one_error_line(run("data stats --data snli --data-dir " + snli + " --vocab " + vocab + " --max-length nan"),
                       "--max-length: 'nan' is not allowed");
  check_one_error_line(run("data stats --data wikitext2 --data-dir " + snli + " --vocab " + vocab + " --release new"),
                       "--release");
  check_one_error_line(run("data stats --data imagenet --data-dir " + snli), "--data");
}

TEST_CASE("bad inputs to the data commands: one error line each, exit status 1") {
  ScratchDir dir;
  const std::string vocab = dir.file("vocab.txt", kVocab);
  const std::string empty_vocab = dir.file("empty_vocab.txt", "");
  // 18 bytes: controls, an escape sequence and four bytes that are not UTF-8 on two lines
  const std::string junk = dir.file("junk.bin", std::string("\x7f" "ELF\x02\x01\x01\x00\x00\xff\xfe\x1b[2J\n\x80\x81", 18));
  fs::create_directories(dir.path / "folder");
  const std::string folder = (dir.path / "folder").string();
  const std::string missing = (dir.path / "missing.txt").string();

  // tokenize: the vocabulary
  check_one_error_line(run("tokenize --vocab " + empty_vocab + " x"), "empty_vocab.txt: the vocabulary file is empty");
  check_one_error_line(run("tokenize --vocab " + folder + " x"), "is a folder");
  check_one_error_line(run("tokenize --vocab " + missing + " x"), "vocabulary file not found: " + missing);
  const Result junk_vocab = run("tokenize --vocab " + junk + " x");
  check_one_error_line(junk_vocab, "junk.bin:1: the vocabulary line is not valid UTF-8 (\\x7fELF\\x02\\x01\\x01\\x00\\x00\\xff\\xfe\\x1b[2J)");
  CHECK(junk_vocab.text().find('\x1b') == std::string::npos);
  const std::string dup = dir.file("dup.txt", "[PAD]\n[UNK]\nhello\nworld\nhello\n");
  check_one_error_line(run("tokenize --vocab " + dup + " x"), "dup.txt:5: the token \"hello\" is also on line 3");
  const std::string blank = dir.file("blank.txt", "[PAD]\n[UNK]\n\nhello\n");
  check_one_error_line(run("tokenize --vocab " + blank + " x"), "blank.txt:3: empty line");
  check_one_error_line(run("tokenize --vocab " + vocab + " < " + folder), "the standard input is a folder");
  const Result no_input = run("tokenize --vocab " + vocab + " < " + dir.file("nothing.txt", ""));
  CHECK(no_input.exit_code() == 0);
  CHECK(no_input.text().empty());

  // vocab train: the texts and --out
  const std::string out = (dir.path / "out.txt").string();
  check_one_error_line(run("vocab train --size 30 --out " + out + " " + missing), "training text not found: " + missing);
  check_one_error_line(run("vocab train --size 30 --out " + out + " " + folder), "training text " + folder + " is a folder");
  const std::string empty_text = dir.file("empty.txt", "");
  check_one_error_line(run("vocab train --size 30 --out " + out + " " + empty_text), "holds no words",
                       /*whole=*/false);
  check_one_error_line(run("vocab train --size 30 --out " + folder + " " + vocab), "--out " + folder + " is a folder");
  check_one_error_line(run("vocab train --size 30 --out '' " + vocab), "--out is empty");
  check_one_error_line(run("vocab train --size 30 --out " + (dir.path / "absent" / "v.txt").string() + " " + vocab),
                       "does not exist");
  // binary junk is text with bytes that are not UTF-8: the words holding them are left out,
  // what is left is learnt from, and nothing is left behind but the vocabulary
  const Result junk_train = run("vocab train --size 30 --out " + out + " " + junk);
  CAPTURE(junk_train.text());
  CHECK(junk_train.exit_code() == 0);
  CHECK(junk_train.text().find("note: " + junk + ": 4 byte sequences that are not UTF-8 (the first on line 1)") !=
        std::string::npos);
  CHECK(junk_train.text().find("note: 2 words holding bytes that are not UTF-8 were left out of training") !=
        std::string::npos);
  CHECK(junk_train.text().find('\x1b') == std::string::npos);
  {
    std::ifstream in(out, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.starts_with("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"));
    CHECK(text.find("\xef\xbf\xbd") == std::string::npos);
  }
  CHECK(names_in(dir.path) == std::vector<std::string>{"blank.txt", "dup.txt", "empty.txt", "empty_vocab.txt", "folder",
                                                       "junk.bin", "nothing.txt", "out.txt", "vocab.txt"});

  // data stats: the folder
  check_one_error_line(run("data stats --data snli --vocab " + vocab + " --data-dir " + vocab),
                       "--data-dir " + vocab + " is a file");
  check_one_error_line(run("data stats --data wikitext2 --vocab " + vocab + " --data-dir " + folder),
                       "no WikiText-2 split found in " + folder, /*whole=*/false);
  check_one_error_line(run("data stats --data wikitext2 --vocab " + empty_vocab + " --data-dir " + folder),
                       "the vocabulary file is empty");
  // an empty split is a sensible result, junk a counted one; an empty or junk SNLI file is an error
  dir.file("wt/wiki.train.raw", "");
  fs::copy_file(junk, dir.path / "wt" / "wiki.valid.raw");
  const Result wt = run("data stats --data wikitext2 --no-cache --vocab " + vocab + " --data-dir " + (dir.path / "wt").string());
  CAPTURE(wt.text());
  CHECK(wt.exit_code() == 0);
  CHECK(wt.text().find("lines 0  bytes 0  tokens 0  [UNK] 0 (0.000%)  not UTF-8 0") != std::string::npos);
  CHECK(wt.text().find("lines 2  bytes 18  tokens 4  [UNK] 4 (100.000%)  not UTF-8 4") != std::string::npos);
  CHECK(wt.text().find("note: " + (dir.path / "wt" / "wiki.valid.raw").string() +
                       ": 4 byte sequences that are not UTF-8 (the first on line 1)") != std::string::npos);
  CHECK(wt.text().find('\x1b') == std::string::npos);
  dir.file("snli_empty/snli_1.0_dev.jsonl", "");
  check_one_error_line(run("data stats --data snli --vocab " + vocab + " --data-dir " + (dir.path / "snli_empty").string()),
                       "snli_1.0_dev.jsonl: no SNLI rows in the file", /*whole=*/false);
  fs::create_directories(dir.path / "snli_junk");
  fs::copy_file(junk, dir.path / "snli_junk" / "snli_1.0_test.jsonl");
  check_one_error_line(run("data stats --data snli --vocab " + vocab + " --data-dir " + (dir.path / "snli_junk").string()),
                       "snli_1.0_test.jsonl:1: not valid UTF-8 (byte 0xff at column 10)", /*whole=*/false);
}

TEST_CASE("tokenize: bytes that are not UTF-8 are [UNK] and counted on stderr") {
  ScratchDir dir;
  const std::string vocab = dir.file("vocab.txt", kVocab);
  const std::string input = dir.file("in.txt", "the cat\nthe c\xe9t\n\xff hello\n");
  const Result r = run("tokenize --vocab " + vocab + " --json < " + input);
  CHECK(r.exit_code() == 0);
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> objects;
  for (std::string line; std::getline(lines, line);) objects.push_back(nlohmann::json::parse(line));
  REQUIRE(objects.size() == 3);
  CHECK(objects[1]["ids"] == std::vector<int>{10, 1});
  CHECK(objects[2]["ids"] == std::vector<int>{1, 5});
  const std::string& note = r.err;
  CHECK(note == "note: standard input: 2 byte sequences that are not UTF-8 (the first on line 2) read as U+FFFD, which "
                "makes each one's word [UNK] (is the file in another encoding, such as Latin-1?)\n");
}
