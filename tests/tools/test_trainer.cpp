// The training loop on the built-in synthetic corpus: the loss falls, an interrupted and
// resumed run repeats an uninterrupted one step for step, checkpoints restore identical
// logits, generation is deterministic for a seed, and the CLI reports bad input clearly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <array>
#include <algorithm>

#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu.h"
#include "tools/generation.h"
#include "data/dependency_probe.h"
#include "engine/autograd.h"
#include "engine/safetensors.h"
#include "ops/ops.h"
#include "tools/plot.h"
#include "tools/trainer.h"
#include "trainer_support.h"

using namespace wedge;
using namespace wedge::tools;
using wedge::testing::step_losses;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) { return wedge::testing::fresh_run_dir(name); }

models::LMConfig tiny(const std::string& kind) { return wedge::testing::small_config(kind, 32, 16); }

TrainSettings settings(const std::string& out, std::int64_t max_steps) {
  TrainSettings s;
  s.out = out;
  s.batch = 4;
  s.block = 16;
  s.lr = 3e-3;
  s.max_steps = max_steps;
  s.eval_every = -1;
  s.seed = 3;
  s.json = true;  // progress to stderr
  s.log_every = 1000;
  return s;
}

}  // namespace

TEST_CASE("training on the synthetic corpus lowers the loss and writes a complete run directory") {
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    INFO(std::string(kind));
    const std::string out = temp_dir(std::string("fall_") + kind);
    TrainResult r = train(tiny(kind), settings(out, 150));
    CHECK(r.steps == 150);
    const auto losses = step_losses(out);
    REQUIRE(losses.size() == 150);
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += losses[i] / 5, last += losses[145 + i] / 5;
    MESSAGE(std::string(kind) << ": loss " << first << " -> " << last << ", valid ppl " << r.best_val_ppl);
    CHECK(last < first - 0.5);
    CHECK(std::isfinite(r.best_val_ppl));
    for (const char* f : {"config.json", "last.safetensors", "best.safetensors", "metrics.jsonl"})
      CHECK_MESSAGE(fs::exists(out + "/" + f), f);
    fs::remove_all(out);
  }
}

TEST_CASE("an interrupted and resumed run reproduces the uninterrupted run step for step") {
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    INFO(std::string(kind));
    const std::string a = temp_dir(std::string("whole_") + kind), b = temp_dir(std::string("split_") + kind);
    train(tiny(kind), settings(a, 10));
    TrainSettings first = settings(b, 10);
    first.stop_after = 4;
    TrainResult r1 = train(tiny(kind), first);
    CHECK(r1.interrupted);
    CHECK(r1.steps == 4);
    TrainSettings second = settings(b, -1);
    second.resume = true;
    TrainResult r2 = train(models::LMConfig{}, second);  // everything comes from the run directory
    CHECK(r2.steps == 10);
    const auto la = step_losses(a), lb = step_losses(b);
    REQUIRE(la.size() == 10);
    REQUIRE(lb.size() == 10);
    for (int i = 0; i < 10; ++i) CHECK_MESSAGE(la[i] == lb[i], "step " << i + 1);
    fs::remove_all(a);
    fs::remove_all(b);
  }
}

TEST_CASE("a bf16 run: it learns, records its precision, and resumes exactly in bf16") {
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    INFO(std::string(kind));
    const std::string a = temp_dir(std::string("bf16_whole_") + kind), b = temp_dir(std::string("bf16_split_") + kind),
                      c = temp_dir(std::string("fp32_") + kind);
    TrainSettings whole = settings(a, 10);
    whole.precision = "bf16";
    train(tiny(kind), whole);
    TrainSettings first = settings(b, 10);
    first.precision = "bf16";
    first.stop_after = 4;
    CHECK(train(tiny(kind), first).interrupted);
    TrainSettings second = settings(b, -1);
    second.resume = true;  // precision "fp32" by default here: the run's own bf16 must win
    CHECK(train(models::LMConfig{}, second).steps == 10);
    train(tiny(kind), settings(c, 10));
    const auto la = step_losses(a), lb = step_losses(b), lc = step_losses(c);
    REQUIRE(la.size() == 10);
    REQUIRE(lb.size() == 10);
    REQUIRE(lc.size() == 10);
    for (int i = 0; i < 10; ++i) CHECK_MESSAGE(la[i] == lb[i], "step " << i + 1);
    // bf16 is not fp32: the losses differ from the first step's update on, but only a little
    // (on a CPU without bf16 instructions the GEMMs take the fp32 fallback: the same run)
    if (kernels::bf16_path() != kernels::Bf16Path::Fp32) {
      CHECK(la[9] != lc[9]);
      CHECK(std::fabs(la[9] - lc[9]) < 0.05 * lc[9]);
    } else {
      CHECK(la[9] == lc[9]);
    }
    std::ifstream config(a + "/config.json");
    CHECK(nlohmann::json::parse(config).at("train").at("precision") == "bf16");
    fs::remove_all(a);
    fs::remove_all(b);
    fs::remove_all(c);
  }
}

TEST_CASE("save -> load gives identical logits; generation is deterministic for a seed") {
  const std::string out = temp_dir("reload");
  train(tiny("grassmann"), settings(out, 5));
  LoadedRun one = load_run(out, "last"), two = load_run(out, "last");
  Tensor ids = Tensor::from_vector<std::int32_t>({5, 6, 7, 8, 9, 10}, {1, 6});
  CHECK(one.model->forward(ids).to_vector<float>() == two.model->forward(ids).to_vector<float>());
  auto g1 = generate_tokens(*one.model, {5, 6}, 12, 0.9, 5, 42);
  auto g2 = generate_tokens(*two.model, {5, 6}, 12, 0.9, 5, 42);
  auto g3 = generate_tokens(*two.model, {5, 6}, 12, 0.9, 5, 43);
  CHECK(g1 == g2);
  CHECK(g1.size() == 14);
  CHECK(g1 != g3);
  // Longer than the block: the context window slides.
  CHECK(generate_tokens(*one.model, {5}, 30, 0.0, 0, 1).size() == 31);
  fs::remove_all(out);
}

TEST_CASE("evaluation covers every predicted token exactly once") {
  const std::string out = temp_dir("evalcount");
  train(tiny("transformer"), settings(out, 2));
  LoadedRun run = load_run(out);
  std::vector<std::int32_t> stream(101, 7);
  CHECK(evaluate(*run.model, stream, 16, 4).tokens == 100);
  std::vector<std::int32_t> exact(33, 7);  // 2 full windows of 16 predictions
  CHECK(evaluate(*run.model, exact, 16, 4).tokens == 32);
  fs::remove_all(out);
}

TEST_CASE("plot draws one SVG of several runs") {
  const std::string a = temp_dir("plot_a"), b = temp_dir("plot_b");
  TrainSettings s = settings(a, 6);
  s.eval_every = 2;
  train(tiny("transformer"), s);
  s.out = b;
  train(tiny("grassmann"), s);
  const std::string svg = temp_dir("curves.svg");
  write_curves_svg({a, b}, svg);
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text.find("<svg") == 0);
  CHECK(text.find("validation perplexity") != std::string::npos);
  CHECK(text.find("(grassmann)") != std::string::npos);
  CHECK(text.find("gluing energy") == std::string::npos);  // no SheafState run: no gluing panels
  // A SheafState run's metrics carry its gluing energy, which gets its own panels.
  const std::string c = temp_dir("plot_c");
  s.out = c;
  train(tiny("sheaf"), s);
  std::ifstream metrics(c + "/metrics.jsonl");
  bool measured = false;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("eval")) continue;
    measured = true;
    CHECK(j.at("gluing_energy").get<double>() >= 0.0);
    CHECK(j.at("gluing_energy_normalised").get<double>() >= 0.0);
    CHECK(j.at("gluing_energy_normalised").get<double>() <= 1.0);  // E_p <= sum a ||r||^2 (variance <= second moment)
    CHECK(j.at("balance_loss").get<double>() > 0.0);
    const auto loads = j.at("expert_load").get<std::vector<double>>();
    REQUIRE(loads.size() == 2);
    CHECK(loads[0] + loads[1] == doctest::Approx(1.0));
  }
  CHECK(measured);
  write_curves_svg({a, b, c}, svg);
  std::ifstream again(svg);
  const std::string with_sheaf((std::istreambuf_iterator<char>(again)), {});
  CHECK(with_sheaf.find("gluing energy (normalised, validation)") != std::string::npos);
  CHECK(with_sheaf.find("(sheaf)") != std::string::npos);
  fs::remove_all(c);
  CHECK_THROWS_WITH_AS(write_curves_svg({a + "_missing"}, svg), doctest::Contains("metrics.jsonl is missing"), std::runtime_error);
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove(svg);
}

TEST_CASE("a fresh training refuses a folder that holds a run; metrics stay whole") {
  const std::string out = temp_dir("claimed");
  train(tiny("transformer"), settings(out, 2));
  std::ifstream before(out + "/metrics.jsonl");
  const std::string metrics((std::istreambuf_iterator<char>(before)), std::istreambuf_iterator<char>());
  CHECK_THROWS_WITH_AS(train(tiny("transformer"), settings(out, 2)), doctest::Contains("--resume"), std::runtime_error);
  std::ifstream after(out + "/metrics.jsonl");
  CHECK(std::string((std::istreambuf_iterator<char>(after)), std::istreambuf_iterator<char>()) == metrics);
  CHECK_FALSE(fs::exists(out + "/config.json.tmp"));
}

TEST_CASE("bad settings are clear errors") {
  CHECK_THROWS_WITH_AS(train(tiny("transformer"), settings("", 1)), doctest::Contains("--out"), std::invalid_argument);
  TrainSettings r = settings(temp_dir("nothing"), 1);
  r.resume = true;
  CHECK_THROWS_WITH_AS(train(tiny("transformer"), r), doctest::Contains("no run to resume"), std::runtime_error);
  CHECK_THROWS_WITH_AS(load_run(temp_dir("nothing")), doctest::Contains("config.json is missing"), std::runtime_error);
  TrainSettings w = settings(temp_dir("wiki"), 1);
  w.corpus.data = "wikitext2";
  w.corpus.data_dir = temp_dir("no_such_dir");
  CHECK_THROWS_AS(train(tiny("transformer"), w), std::runtime_error);
}

TEST_CASE("--data text: one's own files, a validation split carved when none is given, recorded in the run") {
  const fs::path dir = temp_dir("textdata");
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string vocab = write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\nsat\non\nmat\n.\n");
  std::string text;
  for (int i = 0; i < 100; ++i) text += i % 3 == 0 ? "the cat sat on the mat .\n" : "the mat sat on the cat .\n";
  const std::string train_file = write("mine.txt", text), test_file = write("test.txt", "the cat sat .\n");

  CorpusSpec spec;
  spec.data = "text";
  spec.vocab = vocab;
  spec.train_file = train_file;
  const Corpus carved = load_corpus(spec);
  CHECK(carved.name == "text");
  CHECK(carved.vocab_size == 10);
  CHECK(carved.train.size() + carved.valid.size() == 700);  // 7 tokens a line
  CHECK(carved.valid.size() == 35);                          // ceil(5 % of 700)
  REQUIRE(carved.notes.size() == 1);
  CHECK(carved.notes[0].find("last 5 %") != std::string::npos);
  CHECK_THROWS_WITH_AS(carved.split("test"), doctest::Contains("--test"), std::runtime_error);

  TrainSettings s = settings(temp_dir("textrun"), 3);
  s.corpus = spec;
  s.corpus.test_file = test_file;
  train(tiny("transformer"), s);
  LoadedRun run = load_run(s.out, "last");
  CorpusSpec recorded = CorpusSpec::read_from(run.settings);
  CHECK(recorded.data == "text");
  CHECK(fs::path(recorded.train_file).is_absolute());
  CHECK(fs::equivalent(recorded.train_file, train_file));
  recorded.only_split = "valid";  // eval: the training file is still read, to carve the validation split
  const Corpus again = load_corpus(recorded);
  CHECK(again.valid == carved.valid);
  CHECK(again.test.empty());  // only the split asked for
  recorded.only_split = "train";  // the training split is the carved remainder, also when read alone
  CHECK(load_corpus(recorded).train == carved.train);
  recorded.only_split = "test";
  const Corpus test_only = load_corpus(recorded);
  CHECK(test_only.test.size() == 4);
  CHECK(test_only.train.empty());

  spec.valid_file = test_file;  // an explicit validation file: nothing is carved
  const Corpus explicit_valid = load_corpus(spec);
  CHECK(explicit_valid.train.size() == 700);
  CHECK(explicit_valid.notes.empty());

  CorpusSpec bad = spec;
  bad.vocab.clear();
  CHECK_THROWS_WITH_AS(load_corpus(bad), doctest::Contains("--vocab"), std::runtime_error);
  bad = spec;
  bad.train_file.clear();
  CHECK_THROWS_WITH_AS(load_corpus(bad), doctest::Contains("--train FILE"), std::runtime_error);
  bad = CorpusSpec{};
  bad.data = "text";
  bad.vocab = vocab;
  bad.train_file = write("tiny.txt", "the cat");
  CHECK_THROWS_WITH_AS(load_corpus(bad), doctest::Contains("too few to carve"), std::runtime_error);
}

TEST_CASE("a validation split with nothing to predict is an error before training; so is evaluating over it") {
  const fs::path dir = temp_dir("emptyvalid");
  fs::create_directories(dir);
  std::ofstream(dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\nsat\n";
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the cat sat\n";
  std::ofstream(dir / "train.txt") << text;
  std::ofstream(dir / "valid.txt") << "cat\n";  // one token: nothing after it to predict
  TrainSettings s = settings(temp_dir("emptyvalid_run"), 3);
  s.corpus.data = "text";
  s.corpus.vocab = (dir / "vocab.txt").string();
  s.corpus.train_file = (dir / "train.txt").string();
  s.corpus.valid_file = (dir / "valid.txt").string();
  CHECK_THROWS_WITH_AS(train(tiny("transformer"), s), doctest::Contains("holds 1 tokens; at least 2"), std::runtime_error);
  CHECK_FALSE(fs::exists(s.out + "/config.json"));  // refused before the run began
  auto model = models::make_model([] {
    models::LMConfig c = tiny("transformer");
    c.vocab_size = 7;
    return c;
  }());
  CHECK_THROWS_WITH_AS(evaluate(*model, {4}, 16, 4), doctest::Contains("at least 2"), std::runtime_error);
  CHECK_THROWS_WITH_AS(evaluate(*model, {4, 5, 6}, 16, 0), doctest::Contains("--batch is 0"), std::invalid_argument);
  fs::remove_all(dir);
  fs::remove_all(s.out);
}

TEST_CASE("a checkpoint holding NaN is refused by eval/generate, naming the tensor") {
  const std::string out = temp_dir("nanck");
  train(tiny("grassmann"), settings(out, 2));
  SafeTensors best = load_safetensors(out + "/best.safetensors");
  Tensor w = best.tensors.begin()->second.clone();
  w.data<float>()[0] = NAN;
  best.tensors.begin()->second = w;
  save_safetensors(out + "/best.safetensors", best.tensors, best.metadata);
  CHECK_THROWS_WITH_AS(load_run(out), doctest::Contains("holds NaN or Inf"), std::runtime_error);
  fs::remove_all(out);
}

TEST_CASE("depsim: evaluation scores each probe as an independent forward of its window does") {
  data::DependencyProbeSettings ds;
  ds.length = 32;
  ds.train_documents = 1;
  ds.eval_documents = 24;
  ds.seed = 5;
  const data::DependencyProbeCorpus corpus = data::make_dependency_probe_corpus(ds);
  for (const char* kind : {"transformer", "sheaf"}) {
    INFO(std::string(kind));
    models::LMConfig c = wedge::testing::small_config(kind, 32, 32);
    c.vocab_size = static_cast<std::int64_t>(corpus.vocab.size());
    c.patch = 4;
    c.cover_depth = 3;
    auto model = models::make_model(c);
    model->eval();
    // Windows of 16 tokens cut each 32-token document in two: a probe whose deciding token
    // lies in the first half and whose target lies in the second is not scored.
    for (const std::int64_t block : {32, 16}) {
      INFO(block);
      const EvalResult ev = evaluate(*model, corpus.valid, block, 5, corpus.valid_probes);
      REQUIRE(ev.dependencies.is_object());
      std::array<std::int64_t, 3> count{}, correct{};
      for (const data::DependencyProbe& p : corpus.valid_probes) {
        const std::int64_t start = (p.target - 1) / block * block, predict = p.target - 1 - start;
        if (predict - p.distance < 0) continue;
        const std::int64_t len = std::min<std::int64_t>(block, static_cast<std::int64_t>(corpus.valid.size()) - 1 - start);
        std::vector<std::int32_t> window(corpus.valid.begin() + start, corpus.valid.begin() + start + len);
        NoGradGuard no_grad;
        const std::vector<float> logits =
            model->forward(Tensor::from_vector(window, {1, len})).to_vector<float>();
        const float* row = logits.data() + predict * c.vocab_size;
        const auto t = static_cast<std::size_t>(p.type);
        ++count[t];
        correct[t] += std::max_element(row, row + c.vocab_size) - row == corpus.valid[p.target] ? 1 : 0;
      }
      std::int64_t scored = 0;
      for (std::size_t t = 0; t < 3; ++t) {
        const nlohmann::json& j = ev.dependencies["types"][data::kDependencyTypeNames[t]];
        CHECK(j["probes"].get<std::int64_t>() == count[t]);
        if (count[t] > 0) CHECK(j["accuracy"].get<double>() * double(count[t]) == doctest::Approx(double(correct[t])));
        scored += count[t];
      }
      if (block == 16) CHECK(scored < static_cast<std::int64_t>(corpus.valid_probes.size()));
      if (std::string(kind) == "sheaf") {
        // Every crossing probe is counted; those in the cover carry weights in [0, 1].
        const nlohmann::json& g = ev.dependencies.at("gluing");
        REQUIRE(g.contains("entity"));
        CHECK(g["entity"]["in_cover"].get<std::int64_t>() <= g["entity"]["across_patches"].get<std::int64_t>());
        CHECK(g["entity"]["weight_on_source_patch"].get<double>() >= 0);
        CHECK(g["entity"]["weight_on_source_patch"].get<double>() <= 1);
        CHECK(g["entity"]["even_share"].get<double>() >= 1.0 / 3);
        // cover distances 1, 2, 4 with 8 patches; a window of 4 patches has none 4 back
        CHECK(ev.diagnostics.at("gluing_weight_by_distance").size() == (block == 32 ? 3u : 2u));
      } else {
        CHECK_FALSE(ev.dependencies.contains("gluing"));
      }
    }
  }
}

TEST_CASE("depsim: a training run scores the probe at every evaluation, and plot draws it") {
  const std::string out = temp_dir("depsim_run");
  models::LMConfig c = wedge::testing::small_config("sheaf", 16, 16);
  TrainSettings s = settings(out, 12);
  s.corpus.data = "depsim";
  s.eval_every = 6;
  const TrainResult r = train(c, s);
  CHECK(r.steps == 12);
  int evaluations = 0;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("eval")) continue;
    ++evaluations;
    REQUIRE(j.contains("dependencies"));
    CHECK(j["dependencies"]["buckets"] == nlohmann::json({"1", "2-3", "4-7", "8-15"}));
    CHECK(j["dependencies"]["types"]["entity"]["probes"].get<std::int64_t>() > 0);
    CHECK(j["dependencies"].contains("gluing"));
    CHECK(j.contains("gluing_weight_by_distance"));
  }
  CHECK(evaluations >= 2);
  // eval and generate rebuild the same corpus from the run's config (the block is recorded)
  LoadedRun run = load_run(out, "last");
  const Corpus corpus = load_corpus(CorpusSpec::read_from(run.settings));
  CHECK(corpus.name == "depsim");
  const EvalResult ev = evaluate(*run.model, corpus.valid, 16, 4, corpus.valid_probes);
  CHECK(ev.dependencies["types"]["local"]["probes"].get<std::int64_t>() > 0);
  const std::string svg_path = out + "/curves.svg";
  write_curves_svg({out}, svg_path);
  std::ifstream svg(svg_path);
  const std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  CHECK(text.find("key-value recalls, last evaluation") != std::string::npos);
}
