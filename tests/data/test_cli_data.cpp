// The data commands of the `wedge` binary, run as a user would: tokenize (arguments, stdin,
// --json), vocab train, data stats, and the "error: ..." exit for bad input.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Result {
  int status;
  std::string output;  // stdout and stderr together
};

Result run(const std::string& arguments) {
  const std::string command = std::string(WEDGE_CLI) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  std::size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

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
  CHECK(args.status == 0);
  CHECK(args.output == "ids:    5 6 7 9 8\ntokens: hello , world ##s !\n");

  const std::string input = dir.file("in.txt", "the cat\nHELLO dog\n");
  const Result json = run("tokenize --vocab " + vocab + " --json < " + input);
  CHECK(json.status == 0);
  std::istringstream lines(json.output);
  std::string line;
  std::vector<nlohmann::json> objects;
  while (std::getline(lines, line)) objects.push_back(nlohmann::json::parse(line));
  REQUIRE(objects.size() == 2);
  CHECK(objects[0]["ids"] == std::vector<int>{10, 11});
  CHECK(objects[0]["tokens"] == std::vector<std::string>{"the", "cat"});
  CHECK(objects[1]["ids"] == std::vector<int>{5, 1});
  CHECK(objects[1]["tokens"] == std::vector<std::string>{"hello", "[UNK]"});

  const Result special = run("tokenize --vocab " + vocab + " --special --json the cat");
  CHECK(nlohmann::json::parse(special.output)["ids"] == std::vector<int>{2, 10, 11, 3});
}

TEST_CASE("wedge tokenize and data stats fail with a clear error") {
  ScratchDir dir;
  const Result missing = run("tokenize --vocab " + (dir.path / "none.txt").string() + " x");
  CHECK(missing.status == 1);
  CHECK(missing.output.find("error: vocabulary file not found") != std::string::npos);
  const std::string no_unk = dir.file("no_unk.txt", "[PAD]\nhello\n");
  const Result bad_vocab = run("tokenize --vocab " + no_unk + " x");
  CHECK(bad_vocab.status == 1);
  CHECK(bad_vocab.output.find("[UNK]") != std::string::npos);
  const Result no_dir = run("data stats --data snli --data-dir " + (dir.path / "absent").string());
  CHECK(no_dir.status == 1);
  CHECK(no_dir.output.find("download_data.sh") != std::string::npos);
}

TEST_CASE("wedge vocab train writes a vocabulary the tokenizer can load") {
  ScratchDir dir;
  const std::string corpus = dir.file("corpus.txt", "low lower lowest\nnewer newest wider\nlow low new\n");
  const std::string out = (dir.path / "trained.txt").string();
  const Result r = run("vocab train --size 25 --out " + out + " " + corpus);
  CHECK(r.status == 0);
  CHECK(r.output.find("merges") != std::string::npos);  // progress lines
  CHECK(r.output.find("wrote " + out) != std::string::npos);
  std::ifstream in(out);
  std::vector<std::string> tokens;
  for (std::string t; std::getline(in, t);) tokens.push_back(t);
  REQUIRE(tokens.size() == 25);
  CHECK(tokens[1] == "[UNK]");
  const Result tok = run("tokenize --vocab " + out + " --json lowest newer");
  const auto ids = nlohmann::json::parse(tok.output)["ids"].get<std::vector<int>>();
  CHECK(std::find(ids.begin(), ids.end(), 1) == ids.end());  // no [UNK]
}

TEST_CASE("wedge data stats reports the splits it finds and names the missing ones") {
  ScratchDir dir;
  const std::string vocab = dir.file("vocab.txt", kVocab);
  dir.file("wt/wiki.train.raw", " = Hello = \n\n the cat \n");
  dir.file("wt/wiki.test.tokens", " the <unk> \n");
  const Result wt = run("data stats --data wikitext2 --no-cache --vocab " + vocab + " --data-dir " + (dir.path / "wt").string());
  CHECK(wt.status == 0);
  CHECK(wt.output.find("lines 3  bytes 23  tokens 5  [UNK] 2 (40.000%)") != std::string::npos);
  CHECK(wt.output.find("valid  missing") != std::string::npos);
  CHECK(wt.output.find("tokens 2  [UNK] 1 (50.000%)") != std::string::npos);

  dir.file("snli/snli_1.0_dev.jsonl",
           "{\"gold_label\": \"neutral\", \"sentence1\": \"the cat\", \"sentence2\": \"hello\"}\n"
           "{\"gold_label\": \"-\", \"sentence1\": \"the cat\", \"sentence2\": \"hello\"}\n");
  const Result snli = run("data stats --data snli --vocab " + vocab + " --data-dir " + (dir.path / "snli").string());
  CHECK(snli.status == 0);
  CHECK(snli.output.find("train  missing") != std::string::npos);
  CHECK(snli.output.find("rows 2  labelled 1  dropped '-' 1  entailment 0  neutral 1  contradiction 0") !=
        std::string::npos);
}
