// Going on from a run through the real `wedge` binary (tools/run_continuation.h): a run
// keeps its vocabulary and needs no corpus to generate; --resume refuses every changed
// setting by name and only grows; --init-from starts from the parent's exact weights.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/optim.h"
#include "engine/sha256.h"
#include "tools/training_support.h"
#include "trainer_support.h"

namespace fs = std::filesystem;
using Run = wedge::testing::ShellRun;
using wedge::testing::shell;

namespace {

Run run(const std::string& args) { return shell(std::string(WEDGE_CLI) + " " + args); }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The metrics lines of a run: every step line's lr by step, and the eval lines.
struct Metrics {
  std::vector<std::pair<std::int64_t, double>> lr;
  std::vector<nlohmann::json> evals;
};
Metrics read_metrics(const std::string& run_dir) {
  Metrics m;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval")) m.evals.push_back(j);
    else m.lr.emplace_back(j["step"].get<std::int64_t>(), j["lr"].get<double>());
  }
  return m;
}

// A corpus of the user's own: a WordPiece vocabulary and a training file of a few sentences.
struct TextData {
  std::string dir, vocab, train, valid, test;
  explicit TextData(const std::string& name) : dir(wedge::testing::fresh_run_dir(name)) {
    fs::create_directories(dir);
    vocab = dir + "/vocab.txt";
    train = dir + "/mine.txt";
    valid = dir + "/valid.txt";
    test = dir + "/test.txt";
    std::ofstream(vocab) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\ndog\nran\n.\n";
    write(train, 200, "the cat sat on the mat .\n", "the dog ran on the mat .\n");
    write(valid, 20, "the dog sat on the mat .\n", "the cat ran .\n");
    write(test, 20, "the mat sat on the dog .\n", "the cat sat .\n");
  }
  static void write(const std::string& path, int lines, const char* a, const char* b) {
    std::ofstream out(path);
    for (int i = 0; i < lines; ++i) out << (i % 2 ? a : b);
  }
  std::string flags() const { return "--data text --train " + train + " --valid " + valid + " --test " + test + " --vocab " + vocab; }
};

const char* kTiny = "--layers 1 --d-model 16 --d-ff 32 --heads 2 --block 16 --batch 4 --log-every 100";

}  // namespace

TEST_CASE("a run keeps its vocabulary: generate and eval of another split need neither the training file nor --vocab") {
  if (!fs::exists(WEDGE_CLI)) return;
  TextData data("keeps_vocab");
  const std::string out = data.dir + "/run";
  REQUIRE(run("train " + data.flags() + " " + kTiny + " --max-steps 4 --out " + out).status == 0);
  // vocab.txt in the run is the vocabulary byte for byte, and config.json records its sha256.
  std::ifstream a(data.vocab), b(out + "/vocab.txt");
  const std::string original((std::istreambuf_iterator<char>(a)), {}), kept((std::istreambuf_iterator<char>(b)), {});
  CHECK(kept == original);
  const auto config = read_json(out + "/config.json");
  CHECK(config["train"]["vocab_sha256"] == wedge::sha256_hex(original));
  CHECK(config["train"]["tokenizer"] == "wordpiece");
  // Only the recorded splits' files matter from now on, and only the one asked for.
  fs::remove(data.vocab);
  fs::remove(data.train);
  fs::remove(data.valid);
  const Run g = run("generate --run " + out + " --prompt 'the cat' --max-new-tokens 5 --json");
  CHECK_MESSAGE(g.status == 0, g.text());
  CHECK(g.out.find("\"samples\"") != std::string::npos);
  const Run e = run("eval --run " + out + " --split test");
  CHECK_MESSAGE(e.status == 0, e.text());
  CHECK(e.text().find("text test perplexity") != std::string::npos);
  // A vocabulary changed under the run is caught: its ids would mean other words.
  std::ofstream(out + "/vocab.txt", std::ios::app) << "extra\n";
  const Run changed = run("generate --run " + out + " --prompt 'the cat' --max-new-tokens 5");
  CHECK(WEXITSTATUS(changed.status) == 1);
  CHECK(changed.text().find("vocab.txt was changed") != std::string::npos);
  fs::remove_all(data.dir);
}

TEST_CASE("--resume: a changed setting is refused by name, the data must be the run's, only the length grows") {
  if (!fs::exists(WEDGE_CLI)) return;
  TextData data("resume_rules");
  const std::string out = data.dir + "/run";
  REQUIRE(run("train " + data.flags() + " " + kTiny + " --max-steps 6 --lr 0.003 --out " + out).status == 0);
  const std::string config_before = read_json(out + "/config.json").dump();
  auto refused = [&](const std::string& args, const std::string& says) {
    const Run r = run("train --resume --out " + out + " " + args);
    CHECK_MESSAGE(WEXITSTATUS(r.status) == 1, args);
    CHECK_MESSAGE(r.text().find(says) != std::string::npos, args << " -> " << r.text());
    CHECK(read_json(out + "/config.json").dump() == config_before);  // a refused resume changes nothing
  };
  refused("--lr 0.01", "--lr 0.01 differs from the run's 0.003");
  refused("--batch 8", "--batch 8 differs");
  refused("--d-model 32", "--d-model 32 differs");
  refused("--precision bf16", "--precision bf16 differs from the run's fp32");
  refused("--schedule linear", "--schedule linear differs from the run's cosine");
  TextData::write(data.dir + "/other.txt", 200, "the mat ran .\n", "the dog sat .\n");
  refused("--data text --train " + data.dir + "/other.txt", "--train");
  // The same path with other contents: the token ids' fingerprint differs.
  TextData::write(data.train, 200, "the mat ran .\n", "the dog sat .\n");
  refused("", "the train split read now");
  TextData::write(data.train, 200, "the cat sat on the mat .\n", "the dog ran on the mat .\n");
  refused("--max-steps 3", "may only grow");
  // A finished run says so and trains nothing.
  const Run finished = run("train --resume --out " + out);
  CHECK(WEXITSTATUS(finished.status) == 0);
  CHECK(finished.text().find("is finished: 6 of 6 steps") != std::string::npos);
  CHECK(read_metrics(out).lr.size() == 6);
  // The same values given again are not changes.
  CHECK(run("train --resume --out " + out + " --lr 0.003 --batch 4").status == 0);
  // Growing: the run goes on to step 12 with the warm-up it began with, its schedule
  // stretched over 12 steps; config.json records the new length.
  const Run grown = run("train --resume --out " + out + " --max-steps 12");
  CHECK_MESSAGE(grown.status == 0, grown.text());
  CHECK(grown.text().find("grows from 6 to 12 steps") != std::string::npos);
  const auto config = read_json(out + "/config.json");
  CHECK(config["train"]["max_steps"] == 12);
  const std::int64_t warmup = config["train"]["warmup_steps"].get<std::int64_t>();
  CHECK(warmup == 1);  // 5 % of the 6 steps planned at first, at least 1
  const wedge::LrSchedule stretched = wedge::tools::make_schedule("cosine", 0.003, warmup, 12, 0.0003);
  const Metrics m = read_metrics(out);
  REQUIRE(m.lr.size() == 12);
  for (const auto& [step, lr] : m.lr)
    if (step > 6) CHECK_MESSAGE(lr == doctest::Approx(stretched.at(step - 1)).epsilon(1e-12), "step " << step);
  fs::remove_all(data.dir);
}

TEST_CASE("--init-from: the parent's exact weights, a fresh optimizer and schedule, its sizes and vocabulary enforced") {
  if (!fs::exists(WEDGE_CLI)) return;
  TextData data("init_from");
  const std::string parent = data.dir + "/parent", child = data.dir + "/child";
  REQUIRE(run("train " + data.flags() + " " + kTiny + " --max-steps 8 --lr 0.003 --eval-every 4 --out " + parent).status == 0);
  // The fine-tune's first evaluation (step 0, before any update) scores the parent's best
  // weights on the same validation split: the same perplexity as `eval` of the parent.
  const Run e = run("eval --run " + parent + " --batch 4 --json");  // the trainer evaluates in batches of --batch
  REQUIRE(e.status == 0);
  const double parent_ppl = nlohmann::json::parse(e.out.substr(e.out.rfind('{')))["ppl"].get<double>();
  TextData::write(data.dir + "/new.txt", 200, "the dog sat on the cat .\n", "the mat ran .\n");
  const std::string new_data = "--data text --train " + data.dir + "/new.txt --valid " + data.valid + " --vocab " + data.vocab;
  const Run c = run("train --init-from " + parent + " " + new_data + " --max-steps 4 --lr 0.001 --schedule constant --warmup 0 --batch 4 --log-every 100 --out " + child);
  CHECK_MESSAGE(c.status == 0, c.text());
  const Metrics m = read_metrics(child);
  REQUIRE(!m.evals.empty());
  CHECK(m.evals.front()["step"] == 0);
  CHECK(m.evals.front()["ppl"].get<double>() == doctest::Approx(parent_ppl).epsilon(1e-9));
  // A fresh schedule: constant lr from the first step.
  REQUIRE(m.lr.size() == 4);
  for (const auto& [step, lr] : m.lr) CHECK(lr == 0.001);
  // config.json names the parent and the checkpoint's sha256; the sizes are the parent's.
  const auto config = read_json(child + "/config.json");
  CHECK(config["train"]["init_from"]["checkpoint"] == "best");
  CHECK(config["train"]["init_from"]["sha256"] == wedge::sha256_file(parent + "/best.safetensors"));
  CHECK(config["model"]["d_model"] == 16);
  CHECK(config["model"]["block"] == 16);
  // Contradicting the parent's sizes or vocabulary is refused.
  const Run sized = run("train --init-from " + parent + " " + new_data + " --d-model 32 --max-steps 2 --out " + child + "2");
  CHECK(WEXITSTATUS(sized.status) == 1);
  CHECK(sized.text().find("--d-model 32 differs from the run's 16") != std::string::npos);
  std::ofstream(data.dir + "/vocab2.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\ndog\nran\n.\nextra\n";
  const Run vocab = run("train --init-from " + parent + ":last --data text --train " + data.dir + "/new.txt --vocab " +
                        data.dir + "/vocab2.txt --max-steps 2 --out " + child + "3");
  CHECK(WEXITSTATUS(vocab.status) == 1);
  CHECK(vocab.text().find("is not the one that run was trained with") != std::string::npos);
  CHECK(!fs::exists(child + "3/config.json"));
  const Run missing = run("train --init-from " + data.dir + "/nothing --max-steps 2 --out " + child + "4");
  CHECK(WEXITSTATUS(missing.status) == 1);
  CHECK(missing.text().find("no run there") != std::string::npos);
  fs::remove_all(data.dir);
}

TEST_CASE("--config: a run's config.json starts the same run again; flags override; --print-config round-trips") {
  if (!fs::exists(WEDGE_CLI)) return;
  const std::string dir = wedge::testing::fresh_run_dir("config_file");
  fs::create_directories(dir);
  const std::string a = dir + "/a", b = dir + "/b";
  REQUIRE(run("train --model grassmann --layers 1 --d-model 24 --rank 6 --lr 0.004 --max-steps 5 --json --out " + a).status == 0);
  // Everything the first run chose comes back from its config.json: the same losses, bit for bit.
  const Run again = run("train --config " + a + "/config.json --json --out " + b);
  CHECK_MESSAGE(again.status == 0, again.text());
  const auto la = wedge::testing::step_losses(a), lb = wedge::testing::step_losses(b);
  REQUIRE(la.size() == 5);
  CHECK(la == lb);
  CHECK(read_json(b + "/config.json")["model"] == read_json(a + "/config.json")["model"]);
  // --print-config shows what the flags resolve to, and reads back to the same.
  const Run printed = run("train --config " + a + "/config.json --lr 0.001 --print-config");
  REQUIRE(printed.status == 0);
  const auto shown = nlohmann::json::parse(printed.out);
  CHECK(shown["train"]["lr"] == 0.001);  // the flag wins over the file
  CHECK(shown["model"]["model"] == "grassmann");
  CHECK(shown["model"]["rank"] == 6);
  std::ofstream(dir + "/shown.json") << printed.out;
  const Run reread = run("train --config " + dir + "/shown.json --print-config");
  CHECK(nlohmann::json::parse(reread.out) == shown);
  CHECK(!fs::exists(dir + "/c"));  // printing trains nothing and makes no folder
  // A key that is no setting, or a value of the wrong type, is named.
  std::ofstream(dir + "/typo.json") << R"({"model": {"layrs": 3}})";
  const Run typo = run("train --config " + dir + "/typo.json --print-config");
  CHECK(WEXITSTATUS(typo.status) == 1);
  CHECK(typo.text().find("model.layrs is not a setting") != std::string::npos);
  std::ofstream(dir + "/type.json") << R"({"train": {"lr": "fast"}})";
  const Run type = run("train --config " + dir + "/type.json --print-config");
  CHECK(WEXITSTATUS(type.status) == 1);
  CHECK(type.text().find("--config " + dir + "/type.json") != std::string::npos);
  // On --resume the file's values are asked for like flags: another lr is refused.
  std::ofstream(dir + "/lr.json") << R"({"train": {"lr": 0.1}})";
  const Run resumed = run("train --resume --config " + dir + "/lr.json --out " + a);
  CHECK(WEXITSTATUS(resumed.status) == 1);
  CHECK(resumed.text().find("--lr 0.1 differs from the run's 0.004") != std::string::npos);
  fs::remove_all(dir);
}
