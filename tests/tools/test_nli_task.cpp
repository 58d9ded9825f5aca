// The sentence-pair task on a small SNLI folder the test writes: which protocol runs and
// what each split holds, unlabelled pairs skipped and counted, a short training run end to
// end (config, metrics, checkpoints, test report, majority baseline), eval and classify
// through the real binary, and the errors.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/precision.h"
#include "engine/safetensors.h"
#include "engine/sha256.h"
#include "tools/nli_task.h"
#include "tools/plot.h"
#include "tools/trainer.h"
#include "trainer_support.h"

using namespace wedge;
using namespace wedge::tools;
namespace fs = std::filesystem;

namespace {

using wedge::testing::Folder;
using wedge::testing::jsonl;
using wedge::testing::snli_folder;

// A run over the folder's data in batches of 64 at a learning rate a tiny classifier learns at.
NliSettings settings_for(const Folder& f) {
  NliSettings s;
  s.data_dir = f.dir.string();
  s.vocab = f.vocab.string();
  s.json = true;
  s.batch = 64;
  s.lr = 3e-3;
  return s;
}

// A classifier small enough to train in seconds, every head's sizes set.
models::NliConfig tiny_classifier() {
  models::NliConfig c;
  c.layers = 1;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.d_proj = 8;
  c.mixing_heads = 2;
  c.patch = 4;
  c.section_dim = 8;
  c.state_size = 4;
  return c;
}

}  // namespace

TEST_CASE("nli splits: the reduced protocol when only the sample is there, the standard one with the full split") {
  const Folder f = snli_folder("nli_splits");
  const data::Tokenizer tok = data::Tokenizer::from_file(f.vocab);
  NliSettings s = settings_for(f);
  {
    const NliSplits splits = load_nli_splits(s, tok, 48);
    CHECK(splits.protocol == "reduced");
    CHECK(splits.train->size() == 120 + 5000);
    CHECK(splits.select->size() == 6000 - 5000);
    CHECK(splits.test->size() == 60);
    CHECK(splits.skipped_unlabelled == 20 + 1000 + 10);
    CHECK(splits.description.find("reduced") != std::string::npos);
    CHECK(splits.description.find("1 % sample") != std::string::npos);
  }
  s.protocol = "standard";
  CHECK_THROWS_WITH_AS(load_nli_splits(s, tok, 48), doctest::Contains("--protocol reduced"), std::runtime_error);
  std::ofstream(f.dir / "snli_1.0_train.jsonl") << jsonl(700, 1);
  s.protocol = "auto";
  {
    const NliSplits splits = load_nli_splits(s, tok, 48);
    CHECK(splits.protocol == "standard");
    CHECK(splits.train->size() == 600);
    CHECK(splits.select->size() == 6000);
  }
  s.protocol = "reduced";  // still possible on request
  s.train_pairs = 50;
  const NliSplits small = load_nli_splits(s, tok, 48);
  CHECK(small.train->size() == 50);
  s.train_pairs = 80;  // nested: the 50 are the first 50 of the 80
  const NliSplits larger = load_nli_splits(s, tok, 48);
  for (std::size_t i = 0; i < 50; ++i) CHECK((*small.train)[i].premise == (*larger.train)[i].premise);
  s.data_dir = (f.dir / "nowhere").string();
  CHECK_THROWS_AS(load_nli_splits(s, tok, 48), std::runtime_error);
}

TEST_CASE("train --task nli end to end: metrics, checkpoints, test report, majority baseline; eval and classify") {
  const Folder f = snli_folder("nli_train");
  NliSettings s = settings_for(f);
  s.out = wedge::testing::fresh_run_dir("nli_run");
  s.epochs = 2;
  s.train_pairs = 256;
  models::NliConfig c = tiny_classifier();
  for (const char* head : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(head);
    c.head = head;
    s.out = wedge::testing::fresh_run_dir(std::string("nli_run_") + head);
    const NliResult r = train_nli(c, s);
    // The folder now holds a run: a second training there is refused, its files untouched.
    CHECK_THROWS_WITH_AS(train_nli(c, s), doctest::Contains("already holds a run"), std::runtime_error);
    CHECK(r.protocol == "reduced");
    CHECK(r.steps == 2 * 4);
    CHECK(r.train_pairs == 256);
    CHECK(r.best_epoch >= 1);
    CHECK(r.test.count == 60);
    CHECK(r.majority.count == 60);
    CHECK(r.majority.accuracy == doctest::Approx(20.0 / 60).epsilon(0.2));  // a third of the test labels
    CHECK(fs::exists(s.out + "/best.safetensors"));
    CHECK(fs::exists(s.out + "/last.safetensors"));
    CHECK(is_nli_run(s.out));
    int selects = 0, tests = 0;
    std::ifstream metrics(s.out + "/metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("eval", "") == "select") {
        ++selects;
        CHECK(j.at("confusion").size() == 3);
        CHECK(j.at("accuracy_low").get<double>() <= j.at("accuracy").get<double>());
      }
      tests += j.value("eval", "") == "test";
    }
    CHECK(selects == 2);
    CHECK(tests == 1);
    const LoadedNliRun loaded = load_nli_run(s.out);
    CHECK(loaded.config.head == head);
    CHECK(evaluate_nli(*loaded.model, *load_nli_splits(loaded.settings, data::Tokenizer::from_file(f.vocab), 48).test, 16)
              .report.accuracy == doctest::Approx(r.test.accuracy));
  }
  // In bf16 the run records its precision, and evaluating it in that precision gives the
  // test accuracy the training reported.
  {
    c.head = "transformer";
    NliSettings b = s;
    b.out = wedge::testing::fresh_run_dir("nli_run_bf16");
    b.precision = "bf16";
    const NliResult r = train_nli(c, b);
    const LoadedNliRun loaded = load_nli_run(b.out);
    CHECK(loaded.settings.precision == "bf16");
    const MatmulPrecisionGuard bf16(Precision::BF16);
    CHECK(evaluate_nli(*loaded.model, *load_nli_splits(loaded.settings, data::Tokenizer::from_file(f.vocab), 48).test, 16)
              .report.accuracy == doctest::Approx(r.test.accuracy));
  }
  // wedge plot: the selection accuracy per epoch.
  write_curves_svg({s.out}, s.out + "/curves.svg");
  std::ifstream svg(s.out + "/curves.svg");
  const std::string drawn((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  CHECK(drawn.find("selection accuracy") != std::string::npos);
  CHECK(drawn.find("nli, sheaf") != std::string::npos);
  // Through the binary: eval prints the confusion matrix; classify reads pairs. Both read
  // text through the run's own vocab.txt: the vocabulary it was trained with may move.
  CHECK(fs::exists(s.out + "/vocab.txt"));
  fs::rename(f.vocab, f.vocab.string() + ".moved");
  const auto run = [](const std::string& args) { return wedge::testing::shell(std::string(WEDGE_CLI) + " " + args); };
  const wedge::testing::ShellRun evaluated = run("eval --run " + s.out + " --split test");
  CHECK(evaluated.status == 0);
  CHECK(evaluated.out.find("confusion") != std::string::npos);
  std::ofstream(s.out + "/pairs.tsv") << "a man sits .\ta man sits outside .\n\nthe cat sleeps .\ta dog runs .\n";
  const wedge::testing::ShellRun classified = run("classify --run " + s.out + " --file " + s.out + "/pairs.tsv --json");
  CHECK(classified.status == 0);
  std::istringstream classify_lines(classified.out);
  int lines = 0;
  for (std::string line; std::getline(classify_lines, line); ++lines) CHECK(nlohmann::json::parse(line).contains("probabilities"));
  CHECK(lines == 2);
  std::ofstream(s.out + "/bad.tsv") << "a man sits . no tab\n";
  const wedge::testing::ShellRun bad = run("classify --run " + s.out + " --file " + s.out + "/bad.tsv");
  CHECK(bad.status != 0);
  CHECK(bad.err.find("bad.tsv:1: expected premise<TAB>hypothesis") != std::string::npos);
  const wedge::testing::ShellRun flag = run("train --task nli --block 64 --out " + s.out + "_x");
  CHECK(flag.status != 0);
  CHECK(flag.err.find("--block") != std::string::npos);
}

TEST_CASE("train --task nli --init-from: the parent classifier's exact weights, its sizes and vocabulary enforced") {
  const Folder f = snli_folder("nli_init");
  NliSettings s = settings_for(f);
  s.out = wedge::testing::fresh_run_dir("nli_parent");
  s.epochs = 1;
  s.train_pairs = 128;
  const models::NliConfig c = tiny_classifier();
  const NliResult parent = train_nli(c, s);
  REQUIRE(parent.select.count > 0);
  // The fine-tune's epoch 0 scores the parent's best weights on the same selection split.
  NliSettings child = s;
  child.out = wedge::testing::fresh_run_dir("nli_child");
  child.init_from = s.out;
  child.given = {"--init-from", "--lr"};
  child.lr = 1e-3;
  models::NliConfig defaults;  // the flags' sizes, not given: the parent's are taken
  const NliResult r = train_nli(defaults, child);
  const auto first_select = [](const std::string& run) {
    std::ifstream metrics(run + "/metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("eval", "") == "select") return j;
    }
    return nlohmann::json();
  };
  const nlohmann::json theirs = first_select(s.out), ours = first_select(child.out);
  REQUIRE(!ours.is_null());
  CHECK(ours["epoch"] == 0);
  // The same weights on the same pairs: the same mean loss to the last bit (the accuracy
  // alone could agree by chance, e.g. when both predict one class).
  CHECK(ours["loss"].get<double>() == theirs["loss"].get<double>());
  CHECK(ours["accuracy"].get<double>() == parent.select.accuracy);
  CHECK(r.parameters == parent.parameters);
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(child.out + "/config.json"));
  CHECK(config["model"]["d_model"] == 16);
  CHECK(config["train"]["init_from"]["sha256"] == wedge::sha256_file(s.out + "/best.safetensors"));
  // A size given that differs from the parent's is refused, naming the flag.
  NliSettings sized = child;
  sized.out = wedge::testing::fresh_run_dir("nli_child_sized");
  sized.given = {"--init-from", "--d-model"};
  models::NliConfig wider = c;
  wider.d_model = 32;
  CHECK_THROWS_WITH_AS(train_nli(wider, sized), doctest::Contains("--d-model 32 differs from the run's 16"),
                       std::invalid_argument);
  // A language-model run is no classifier to start from.
  NliSettings lm = child;
  lm.out = wedge::testing::fresh_run_dir("nli_child_lm");
  lm.init_from = f.dir.string();
  CHECK_THROWS_WITH_AS(train_nli(defaults, lm), doctest::Contains("no run there"), std::invalid_argument);
}

TEST_CASE("train --task nli --resume: an interrupted classifier continues exactly; its settings and data are its own") {
  const Folder f = snli_folder("nli_resume");
  NliSettings s = settings_for(f);
  s.epochs = 2;
  s.train_pairs = 256;  // 4 steps an epoch
  s.log_every = 1;
  models::NliConfig c = tiny_classifier();
  c.dropout = 0.1;  // the dropout stream must continue where it stopped too
  s.out = wedge::testing::fresh_run_dir("nli_whole");
  const NliResult whole = train_nli(c, s);
  REQUIRE(whole.steps == 8);
  // The same run, stopped after 3 steps (inside the first epoch), then after 3 more
  // (across the epoch's evaluation), then resumed to the end.
  NliSettings part = s;
  part.out = wedge::testing::fresh_run_dir("nli_parts");
  part.stop_after = 3;
  const NliResult first = train_nli(c, part);
  CHECK(first.interrupted);
  CHECK(first.steps == 3);
  CHECK(first.test.count == 0);  // an unfinished run reports no test
  NliSettings again = part;
  again.resume = true;
  again.given = {"--resume", "--out", "--stop-after"};
  const NliResult second = train_nli(models::NliConfig(), again);  // sizes not given: the run's
  CHECK(second.steps == 6);
  again.stop_after = -1;
  again.given = {"--resume", "--out"};
  const NliResult last = train_nli(models::NliConfig(), again);
  CHECK(last.steps == 8);
  CHECK_FALSE(last.interrupted);
  // Every step's loss and every selection, bit for bit, each logged once.
  const auto lines = [](const std::string& run) {
    std::vector<std::string> kept;
    std::ifstream metrics(run + "/metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      j.erase("time");
      kept.push_back(j.dump());
    }
    return kept;
  };
  CHECK(lines(part.out) == lines(s.out));
  CHECK(last.best_epoch == whole.best_epoch);
  CHECK(last.select.accuracy == whole.select.accuracy);
  CHECK(last.test.accuracy == whole.test.accuracy);
  const SafeTensors best_whole = load_safetensors(s.out + "/best.safetensors"),
                    best_parts = load_safetensors(part.out + "/best.safetensors");
  REQUIRE(best_parts.tensors.size() == best_whole.tensors.size());
  for (const auto& [name, t] : best_whole.tensors) {
    CAPTURE(name);
    CHECK(best_parts.tensors.at(name).to_vector<float>() == t.to_vector<float>());
  }
  // A finished run says so and trains nothing.
  const NliResult done = train_nli(models::NliConfig(), again);
  CHECK(done.already_finished);
  CHECK(done.steps == 8);
  // Settings fixed by the run are refused by name; the length may only grow.
  NliSettings lr = again;
  lr.lr = 1e-2;
  lr.given = {"--resume", "--out", "--lr"};
  CHECK_THROWS_WITH_AS(train_nli(models::NliConfig(), lr), doctest::Contains("--lr 0.01 differs from the run's 0.003"),
                       std::invalid_argument);
  NliSettings head = again;
  head.given = {"--resume", "--out", "--head"};
  models::NliConfig grassmann;
  grassmann.head = "grassmann";
  CHECK_THROWS_WITH_AS(train_nli(grassmann, head), doctest::Contains("--head grassmann differs from the run's transformer"),
                       std::invalid_argument);
  NliSettings shorter = again;
  shorter.epochs = 1;
  shorter.given = {"--resume", "--out", "--epochs"};
  CHECK_THROWS_WITH_AS(train_nli(models::NliConfig(), shorter), doctest::Contains("may only grow"), std::invalid_argument);
  // Other pairs under the same file names are refused, naming the split.
  std::ofstream(f.dir / "snli_1.0_dev.jsonl") << jsonl(7000, 1);
  NliSettings longer = again;
  longer.epochs = 3;
  longer.given = {"--resume", "--out", "--epochs"};
  const std::string changed = "split read now (1000 pairs of " + f.dir.string() + ") is not the one";
  CHECK_THROWS_WITH_AS(train_nli(models::NliConfig(), longer), doctest::Contains(changed.c_str()), std::runtime_error);
  std::ofstream(f.dir / "snli_1.0_dev.jsonl") << jsonl(7000, 0);
  // Through the binary: `train --resume` of a classifier run needs no --task nli; a longer
  // run continues from step 8 and reports its test accuracy again.
  const wedge::testing::ShellRun grown =
      wedge::testing::shell(std::string(WEDGE_CLI) + " train --resume --out " + part.out + " --epochs 3 --json");
  CHECK(grown.status == 0);
  CHECK(grown.err.find("the run grows from 8 to 12 steps") != std::string::npos);
  CHECK(grown.err.find("resumed from") != std::string::npos);
  const std::string last_line = grown.out.substr(grown.out.rfind('\n', grown.out.size() - 2) + 1);
  CHECK(nlohmann::json::parse(last_line).at("steps") == 12);
}

TEST_CASE("train --task nli --backbone: heads on a frozen wedge language model, recorded by sha256, checked when used") {
  const Folder f = snli_folder("nli_backbone");
  // A language model on text in the classifier's vocabulary, long enough for a pair of two
  // sentences of 16 tokens (31 positions).
  const auto train_lm = [&](const std::string& name, std::int64_t block, std::uint64_t seed, bool own_vocab) {
    std::string text;
    for (int i = 0; i < 200; ++i) text += i % 3 == 0 ? "a man sits outside .\n" : "two kids play . the dog runs .\n";
    std::ofstream(f.dir / "lm.txt") << text;
    TrainSettings s;
    if (own_vocab) {
      s.corpus.data = "text";
      s.corpus.train_file = (f.dir / "lm.txt").string();
      s.corpus.vocab = f.vocab.string();
    }
    s.block = block;
    s.batch = 8;
    s.max_steps = 4;
    s.json = true;
    s.seed = seed;
    s.out = wedge::testing::fresh_run_dir(name);
    models::LMConfig c = wedge::testing::small_config("transformer", 8, block);
    c.layers = 1;
    c.seed = seed;
    train(c, s);
    return s.out;
  };
  const std::string lm = train_lm("nli_backbone_lm", 32, 1, true);
  NliSettings s = settings_for(f);
  s.out = wedge::testing::fresh_run_dir("nli_on_backbone");
  s.epochs = 1;
  s.train_pairs = 128;
  s.backbone = lm;
  models::NliConfig c = tiny_classifier();
  c.max_length = 16;
  const NliResult r = train_nli(c, s);
  REQUIRE(r.test.count == 60);
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(s.out + "/config.json"));
  CHECK(config["model"]["backbone_d"] == 8);
  CHECK(config["train"]["backbone_weights"]["sha256"] == wedge::sha256_file(lm + "/best.safetensors"));
  // Only the classifier's weights are in its checkpoints.
  const SafeTensors best = load_safetensors(s.out + "/best.safetensors");
  CHECK(best.tensors.count("backbone_projection.weight") == 1);
  CHECK(best.tensors.count("token_embedding.weight") == 0);
  CHECK(best.tensors.size() == load_nli_run(s.out).model->named_parameters().size());
  // Loaded again (the backbone with it), it scores what the training reported.
  const LoadedNliRun loaded = load_nli_run(s.out);
  REQUIRE(loaded.model->backbone() != nullptr);
  CHECK(evaluate_nli(*loaded.model, *load_nli_splits(loaded.settings, data::Tokenizer::from_file(f.vocab), 16).test, 16)
            .report.accuracy == doctest::Approx(r.test.accuracy));
  const wedge::testing::ShellRun evaluated =
      wedge::testing::shell(std::string(WEDGE_CLI) + " eval --run " + s.out + " --split test --json");
  CHECK(evaluated.status == 0);
  // wedge plot says which runs read a backbone.
  write_curves_svg({s.out}, s.out + "/curves.svg");
  std::ifstream svg(s.out + "/curves.svg");
  const std::string drawn((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  CHECK(drawn.find("nli, transformer, on a frozen LM") != std::string::npos);
  // A resumed run continues on the same backbone.
  NliSettings longer = s;
  longer.resume = true;
  longer.epochs = 2;
  longer.given = {"--resume", "--out", "--epochs"};
  CHECK(train_nli(models::NliConfig(), longer).steps == 4);
  // What does not fit is refused by name: a backbone trained with another vocabulary, one
  // too short for the pairs, and a backbone whose weights changed after the classifier.
  NliSettings other = s;
  other.out = wedge::testing::fresh_run_dir("nli_on_other");
  other.backbone = train_lm("nli_backbone_words", 32, 1, false);  // the built-in corpus's words
  const std::string vocab_refused = "--backbone " + other.backbone + ": the vocabulary";
  CHECK_THROWS_WITH_AS(train_nli(c, other), doctest::Contains(vocab_refused.c_str()), std::invalid_argument);
  other.backbone = train_lm("nli_backbone_short", 16, 1, true);
  CHECK_THROWS_WITH_AS(train_nli(c, other), doctest::Contains("needs 31"), std::invalid_argument);
  train_lm("nli_backbone_lm", 32, 2, true);  // the same folder, other weights
  CHECK_THROWS_WITH_AS(load_nli_run(s.out), doctest::Contains("changed since the classifier was trained"), std::runtime_error);
}

TEST_CASE("train --task nli --config: a classifier run's own config.json starts the same run again; --print-config") {
  const Folder f = snli_folder("nli_config");
  const auto run = [](const std::string& args) { return wedge::testing::shell(std::string(WEDGE_CLI) + " " + args); };
  const std::string first = wedge::testing::fresh_run_dir("nli_config_a"), second = wedge::testing::fresh_run_dir("nli_config_b");
  const std::string data = " --data-dir " + f.dir.string() + " --vocab " + f.vocab.string();
  const wedge::testing::ShellRun a = run("train --task nli" + data + " --layers 1 --d-model 16 --heads 2 --d-ff 32 --lr 3e-3 "
                                         "--batch 64 --train-pairs 128 --epochs 2 --schedule linear --seed 4 --json --out " + first);
  REQUIRE(a.status == 0);
  const wedge::testing::ShellRun b = run("train --task nli --config " + first + "/config.json --json --out " + second);
  REQUIRE(b.status == 0);
  CHECK(wedge::testing::step_losses(second) == wedge::testing::step_losses(first));
  const nlohmann::json ours = nlohmann::json::parse(std::ifstream(second + "/config.json"));
  CHECK(ours["train"]["schedule"] == "linear");
  CHECK(ours["model"]["d_model"] == 16);
  CHECK(ours["model"]["seed"] == 4);
  // --print-config shows what would run, a flag over the file's value; it trains nothing.
  const wedge::testing::ShellRun shown = run("train --task nli --config " + first + "/config.json --lr 1e-3 --print-config --out " +
                                             wedge::testing::fresh_run_dir("nli_config_c"));
  REQUIRE(shown.status == 0);
  const nlohmann::json printed = nlohmann::json::parse(shown.out);
  CHECK(printed["task"] == "nli");
  CHECK(printed["train"]["lr"] == 1e-3);
  CHECK(printed["train"]["train_pairs"] == 128);
  // A language model's configuration is no classifier's, and a key that is no setting is named.
  std::ofstream(first + "/lm.json") << R"({"model": {"model": "transformer"}, "train": {"lr": 0.001}})";
  const wedge::testing::ShellRun lm = run("train --task nli" + data + " --config " + first + "/lm.json --out " + second + "_x");
  CHECK(lm.status != 0);
  CHECK(lm.err.find("the configuration of a language model") != std::string::npos);
  std::ofstream(first + "/typo.json") << R"({"task": "nli", "train": {"epoch": 3}})";
  const wedge::testing::ShellRun typo = run("train --task nli" + data + " --config " + first + "/typo.json --out " + second + "_y");
  CHECK(typo.status != 0);
  CHECK(typo.err.find("train.epoch is not a setting") != std::string::npos);
}
