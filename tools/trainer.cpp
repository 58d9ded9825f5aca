#include "tools/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/core.h>

#include "engine/json_field.h"
#include "engine/safetensors.h"
#include "models/memory_check.h"
#include "tools/run_continuation.h"
#include "tools/training_support.h"

namespace wedge::tools {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

nlohmann::json TrainSettings::to_json() const {
  nlohmann::json j = {{"block", block}};
  write_loop_json(j);
  corpus.write_to(j);
  return j;
}

void TrainSettings::read_json(const nlohmann::json& t) {
  if (t.contains("data")) corpus = CorpusSpec::read_from(t);
  read_loop_json(t);
  block = json_field(t, "block", block);
}

// ---- training -------------------------------------------------------------------------------------

namespace {

// A resumed run is the same run: its config.json wins. A flag given now must name the run's
// own value (tools/run_continuation.h), except where the data files moved (--data-dir,
// --vocab: the token ids are checked once read), the length (--epochs, --max-steps: checked
// once the step is known), and what does not change the training's arithmetic.
TrainSettings adopt_recorded_settings(const TrainingLoop& loop, const TrainSettings& given, const models::LMConfig& given_model) {
  loop.refuse_changed(nlohmann::json{{"model", given_model}, {"train", given.to_json()}});
  TrainSettings st = given;
  // What a run recorded before these settings existed: runs before schedules were chosen
  // were cosine, before mixed precision fp32, before micro-batches one piece per process.
  st.schedule = "cosine";
  st.min_lr = -1;
  st.precision = "fp32";
  st.micro_batch = 0;
  st.deterministic = false;
  st.read_json(loop.recorded().at("train"));
  st.corpus = CorpusSpec::read_from(loop.recorded().at("train"));
  if (!given.corpus.data_dir.empty()) st.corpus.data_dir = given.corpus.data_dir;
  if (!given.corpus.vocab.empty()) st.corpus.vocab = given.corpus.vocab;
  st.quiet_samples = given.quiet_samples;
  TrainingLoop::keep_invocation_settings(st, given);
  st.validate(loop.config_path());
  return st;
}

// The model config of the run: a resumed run's own, a parent's sizes (with the flags that
// may differ from them), or the one given; its vocabulary and positions from the corpus.
models::LMConfig run_model_config(TrainingLoop& loop, const models::LMConfig& given, const TrainSettings& st,
                                  const Corpus& corpus) {
  models::LMConfig config = loop.model_config(given);
  config.vocab_size = corpus.vocab_size;
  if (!st.resume) {
    if (loop.parent() == nullptr) config.block = std::max(config.block, st.block);  // a parent's position table is what it is
    config.seed = st.seed;
  }
  if (st.block > config.block)
    throw std::runtime_error(fmt::format("train: --block {} exceeds the model's position table ({})", st.block, config.block));
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    if (!st.resume) throw;
    throw std::invalid_argument(loop.config_path() + ": " + e.what());
  }
  return config;
}

}  // namespace

void TrainSettings::validate(const std::string& config_file) const {
  validate_loop(config_file);
  if (block < 2)
    throw std::invalid_argument(fmt::format("{} is {}; it must be at least 2", setting_name(config_file, "--block"), block));
}

TrainResult train(const models::LMConfig& config_in, const TrainSettings& settings_in) {
  settings_in.validate("");
  TrainingLoop loop(settings_in, "lm");
  TrainSettings st = settings_in.resume ? adopt_recorded_settings(loop, settings_in, config_in) : settings_in;
  if (st.corpus.data == "synthetic") st.corpus.data.clear();
  st.corpus.seed = st.seed;
  st.corpus.block = st.block;

  const auto t_load = Clock::now();
  const Corpus corpus = load_corpus(st.corpus);
  const models::LMConfig config = run_model_config(loop, config_in, st, corpus);
  if (loop.parent() != nullptr) loop.parent()->check_vocabulary(corpus.codec, corpus.name);
  if (st.resume) check_same_data(loop.recorded().at("train"), corpus, loop.config_path(), st.out);
  if (corpus.valid.size() < 2)
    throw std::runtime_error(fmt::format("train: the validation split of {} holds {} tokens; at least 2 are needed to measure "
                                         "a perplexity",
                                         corpus.name, corpus.valid.size()));
  loop.say(fmt::format("data: {} - {} train / {} valid tokens, vocabulary {} ({:.1f}s)", corpus.name, corpus.train.size(),
                       corpus.valid.size(), corpus.vocab_size, std::chrono::duration<double>(Clock::now() - t_load).count()));
  for (const std::string& note : corpus.notes) loop.say("data: " + note);

  const Device device = Device::parse(st.device);
  choose_gpu_of_rank(loop.comm(), device);
  // Every product of the run (training and evaluation) in the run's precision.
  const Precision precision = parse_precision(st.precision);
  const MatmulPrecisionGuard precision_scope(precision);
  models::check_model_memory(config, models::ModelUse::training);
  auto model = models::make_model(config);
  model->to(device);
  model->train();
  // SheafStateLM has no feed-forward of width d_ff: its experts' width is expert_d_ff.
  const std::string ff = config.model == "sheaf" ? fmt::format("{} experts of d_ff {}", config.types, config.expert_d_ff)
                                                 : fmt::format("d_ff {}", config.d_ff);
  loop.say(fmt::format("model: {} - {} layers, d {}, {}, {} parameters, on {}, {}", config.model, config.layers,
                       config.d_model, ff, model->num_parameters(), device.str(), precision_description(precision, device)));

  LmTask task(*model, corpus, st.block, st.batch, st.seed);
  nlohmann::json t = st.to_json();
  t["data_sha256"] = data_fingerprint(corpus);
  t.update(vocab_record(corpus.codec));
  const LoopResult r = loop.run(task, st, nlohmann::json{{"model", config}, {"train", t}}, corpus.codec.vocab_text);
  TrainResult result;
  static_cast<LoopResult&>(result) = r;
  result.final_val_ppl = r.last_score;
  result.best_val_ppl = r.best_score;
  result.corpus = corpus.name;
  return result;
}

// ---- using a trained model --------------------------------------------------------------------------

LoadedRun load_run(const std::string& run_dir, const std::string& which, Device device) {
  const std::string config_path = run_dir + "/config.json";
  std::ifstream in(config_path);
  if (!in) throw std::runtime_error("no run in '" + run_dir + "': " + config_path + " is missing (train one with `wedge train --out " + run_dir + "`)");
  LoadedRun r;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    r.config = j.at("model").get<models::LMConfig>();
    r.settings = j.at("train");
    r.config.validate();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read " + config_path + ": " + e.what());
  }
  std::string path = run_dir + "/" + which + ".safetensors";
  if (which == "best" && !fs::exists(path)) path = run_dir + "/last.safetensors";
  models::check_model_memory(r.config, models::ModelUse::evaluation);
  r.model = models::make_model(r.config);
  SafeTensors st = load_safetensors(path);
  load_parameters(*r.model, st, path);
  r.model->to(device);
  r.model->eval();
  return r;
}

}  // namespace wedge::tools
