#include "tools/run_continuation.h"

#include <algorithm>
#include <bit>
#include <filesystem>
#include <stdexcept>

#include <fmt/core.h>

#include "engine/json_field.h"
#include "engine/safetensors.h"
#include "engine/sha256.h"
#include "tools/run_folder.h"
#include "tools/training_support.h"

namespace wedge::tools {

namespace fs = std::filesystem;

std::string config_key_of_flag(const std::string& flag) {
  if (flag == "--train") return "train_file";
  if (flag == "--valid") return "valid_file";
  if (flag == "--test") return "test_file";
  if (flag == "--no-mix-out-proj") return "mix_out_proj";
  std::string key = flag.rfind("--", 0) == 0 ? flag.substr(2) : flag;
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

void refuse_changed_flags(const GivenFlags& given, const std::set<std::string>& free, const nlohmann::json& wanted,
                          const nlohmann::json& recorded, const std::string& section, const std::string& file,
                          const std::string& context, const std::string& hint) {
  if (!recorded.contains(section) || !wanted.contains(section)) return;
  const nlohmann::json& have = recorded.at(section);
  const nlohmann::json& want = wanted.at(section);
  for (const std::string& flag : given) {
    if (free.count(flag) > 0) continue;
    const std::string key = config_key_of_flag(flag);
    if (!have.contains(key) || !want.contains(key)) continue;
    // Numbers compare by value (a recorded 1 and a given 1.0 are the same setting).
    const nlohmann::json& a = want.at(key);
    const nlohmann::json& b = have.at(key);
    const bool same = a.is_number() && b.is_number() ? a.get<double>() == b.get<double>() : a == b;
    if (same) continue;
    auto shown = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    throw std::invalid_argument(fmt::format("{}: {} {} differs from the run's {} ({}: {}.{}){}", context, flag, shown(a),
                                            shown(b), file, section, key, hint));
  }
}

std::string token_ids_sha256(const std::vector<std::int32_t>& ids) {
  static_assert(std::endian::native == std::endian::little, "token ids are hashed as little-endian bytes");
  Sha256 h;
  h.update(ids.data(), ids.size() * sizeof(std::int32_t));
  return h.hex();
}

nlohmann::json data_fingerprint(const Corpus& corpus) {
  nlohmann::json j = nlohmann::json::object();
  j["train"] = token_ids_sha256(corpus.train);
  j["valid"] = token_ids_sha256(corpus.valid);
  return j;
}

void check_same_data(const nlohmann::json& recorded, const nlohmann::json& now,
                     const std::function<std::string(const std::string&)>& describe, const std::string& file,
                     const std::string& run_dir) {
  if (!recorded.contains("data_sha256") || !recorded.at("data_sha256").is_object()) return;  // recorded before fingerprints
  for (const auto& [split, sha] : recorded.at("data_sha256").items()) {
    if (!now.contains(split) || now.at(split) == sha) continue;
    throw std::runtime_error(fmt::format(
        "train --resume: the {} split read now ({}) is not the one {} was trained on (the sha256 of its token ids "
        "differs from {}: data_sha256.{}); a resumed run trains on its own data. To train on new data, start a new run "
        "from its weights: `wedge train --init-from {} --out NEW ...`",
        split, describe(split), run_dir, file, split, run_dir));
  }
}

void check_same_data(const nlohmann::json& recorded, const Corpus& corpus, const std::string& file,
                     const std::string& run_dir) {
  check_same_data(recorded, data_fingerprint(corpus),
                  [&](const std::string& split) { return fmt::format("{} tokens of {}", corpus.split(split).size(), corpus.name); },
                  file, run_dir);
}

nlohmann::json vocab_record(const TextCodec& codec) {
  return {{"tokenizer", codec.kind}, {"vocab_sha256", sha256_hex(codec.vocab_text)}};
}

TextCodec run_codec(const std::string& run_dir, const nlohmann::json& settings) {
  const std::string path = run_dir + "/" + kRunVocabFile;
  if (!fs::exists(path)) {
    // A run from before runs kept their vocabulary: the corpus it names (its smallest split).
    CorpusSpec spec = CorpusSpec::read_from(settings);
    spec.only_split = "valid";
    return load_corpus(spec).codec;
  }
  TextCodec codec = read_codec(json_field(settings, "tokenizer", std::string("wordpiece")), path);
  const std::string recorded = json_field(settings, "vocab_sha256", std::string());
  const std::string now = sha256_hex(codec.vocab_text);
  if (!recorded.empty() && recorded != now)
    throw std::runtime_error(fmt::format("{} was changed after the run was trained (its sha256 is {}, {}/config.json "
                                         "records {}); the model's token ids would mean other words",
                                         path, now, run_dir, recorded));
  return codec;
}

CorpusSpec run_corpus_spec(const std::string& run_dir, const nlohmann::json& settings) {
  CorpusSpec spec = CorpusSpec::read_from(settings);
  const std::string kept = run_dir + "/" + kRunVocabFile;
  if (json_field(settings, "tokenizer", std::string()) == "wordpiece" && fs::exists(kept)) {
    run_codec(run_dir, settings);  // checked against its recorded sha256
    spec.vocab = kept;
  }
  return spec;
}

ParentRun ParentRun::from(const std::string& arg, nlohmann::json config, const std::string& flag) {
  ParentRun p;
  p.arg = arg;
  p.flag = flag;
  p.dir = arg;
  for (const char* which : {"best", "last"}) {
    const std::string suffix = std::string(":") + which;
    if (arg.size() > suffix.size() && arg.compare(arg.size() - suffix.size(), suffix.size(), suffix) == 0) {
      p.dir = arg.substr(0, arg.size() - suffix.size());
      p.checkpoint = which;
    }
  }
  if (p.dir.empty()) throw std::invalid_argument(flag + " needs a run folder: RUN, RUN:best or RUN:last");
  p.config = std::move(config);
  return p;
}

ParentRun ParentRun::open(const std::string& arg, const std::string& task, const std::string& flag) {
  ParentRun p = from(arg, nlohmann::json::object(), flag);
  const std::string path = p.dir + "/config.json";
  if (!fs::exists(path)) throw std::invalid_argument(fmt::format("{} {}: no run there ({} is missing)", flag, arg, path));
  p.config = read_json_file(path);
  if (json_field(p.config, "task", std::string("lm")) != task || !p.config.contains("model") || !p.config.contains("train"))
    throw std::invalid_argument(fmt::format("{} {}: not a {} run ({})", flag, arg,
                                            task == "lm" ? "language-model" : "sentence-pair classifier", path));
  if (!fs::exists(p.file()))
    throw std::invalid_argument(fmt::format("{} {}: the run has no checkpoint yet ({} is missing)", flag, arg, p.file()));
  return p;
}

std::string ParentRun::file() const {
  const std::string best = dir + "/best.safetensors";
  if (checkpoint == "best" && fs::exists(best)) return best;
  return dir + "/last.safetensors";
}

nlohmann::json ParentRun::model_config(const nlohmann::json& flags, const GivenFlags& given) const {
  // What a fine-tune may choose anew: its regularisation, its seed (dropout and the order of
  // the data), its block (checked against the position table later) and its vocabulary file
  // (checked by content).
  static const std::set<std::string> tunable = {"--dropout", "--energy-weight", "--balance-weight", "--seed",
                                                "--block",   "--vocab",         "--vocab-size"};
  refuse_changed_flags(given, tunable, nlohmann::json{{"model", flags}}, config, "model", dir + "/config.json",
                       "train --init-from " + arg, "; a run started from another takes its sizes");
  nlohmann::json model = config.at("model");
  for (const char* flag : {"--dropout", "--energy-weight", "--balance-weight"}) {
    const std::string key = config_key_of_flag(flag);
    if (given.count(flag) > 0 && flags.contains(key)) model[key] = flags.at(key);
  }
  return model;
}

void ParentRun::check_vocabulary(const TextCodec& codec, const std::string& what) const {
  const std::string theirs = json_field(config.at("train"), "vocab_sha256", std::string());
  const std::string ours = sha256_hex(codec.vocab_text);
  const auto entries = json_field(config.at("model"), "vocab_size", std::int64_t{0});
  if ((!theirs.empty() && theirs != ours) || entries != codec.vocab_size)
    throw std::invalid_argument(fmt::format(
        "{} {}: the vocabulary of {} ({} entries) is not the one that run was trained with ({} entries{}); "
        "its token ids would mean other words",
        flag, arg, what, codec.vocab_size, entries, theirs.empty() ? "" : ", sha256 " + theirs));
}

nlohmann::json ParentRun::load_weights(Module& model) const {
  const std::string path = file();
  const SafeTensors ck = load_safetensors(path);
  load_parameters(model, ck, path);
  auto absolute = [](const std::string& p) { return fs::absolute(p).lexically_normal().string(); };
  return {{"run", absolute(dir)},
          {"checkpoint", checkpoint},
          {"file", absolute(path)},
          {"step", metadata_int(ck, "step", path)},
          {"sha256", sha256_file(path)}};
}

}  // namespace wedge::tools
