#include "tools/config_file.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/core.h>

#include "tools/training_support.h"

namespace wedge::tools {

namespace {

// The flag that sets a key of config.json (the inverse of config_key_of_flag).
std::string flag_of_key(const std::string& key) {
  if (key == "train_file") return "--train";
  if (key == "valid_file") return "--valid";
  if (key == "test_file") return "--test";
  if (key == "mix_out_proj") return "--no-mix-out-proj";
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// Keys of "train" a run records about itself rather than settings to choose.
const std::set<std::string> kRecordedOnly = {"warmup_steps", "data_sha256", "tokenizer", "vocab_sha256", "init_from",
                                             "backbone_weights"};

// Copies the keys of `section` of the file into `current`, except those whose flag the user
// gave; each key must be one `known` names. Returns the flags of the keys it copied.
std::set<std::string> merge(nlohmann::json& current, const nlohmann::json& file, const char* section,
                            const std::set<std::string>& known, const std::set<std::string>& given, const std::string& path) {
  std::set<std::string> applied;
  if (!file.contains(section)) return applied;
  const nlohmann::json& values = file.at(section);
  if (!values.is_object()) throw std::invalid_argument(fmt::format("--config {}: \"{}\" must be a JSON object", path, section));
  for (const auto& [key, value] : values.items()) {
    if (kRecordedOnly.count(key) > 0 && std::string(section) == "train") continue;
    if (known.count(key) == 0) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      throw std::invalid_argument(fmt::format("--config {}: {}.{} is not a setting (the {} settings are: {})", path, section,
                                              key, section, names));
    }
    const std::string flag = flag_of_key(key);
    if (given.count(flag) > 0) continue;  // the command line wins
    current[key] = value;
    applied.insert(flag);
  }
  return applied;
}

std::set<std::string> keys_of(const nlohmann::json& j) {
  std::set<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.insert(key);
  return keys;
}

// The file, checked to be a configuration of `task` ("lm" | "nli").
nlohmann::json read_config_file(const std::string& path, const std::string& task) {
  const nlohmann::json file = read_json_file(path);
  if (!file.is_object()) throw std::invalid_argument("--config " + path + ": expected a JSON object with \"model\" and \"train\"");
  for (const auto& [key, value] : file.items())
    if (key != "model" && key != "train" && key != "task")
      throw std::invalid_argument(fmt::format("--config {}: \"{}\" is not a section (expected \"model\" and \"train\")", path, key));
  const std::string theirs = file.value("task", std::string("lm"));
  if (theirs != task)
    throw std::invalid_argument(fmt::format("--config {}: the configuration of a {}; this is a {} run (--task {})", path,
                                            theirs == "nli" ? "sentence-pair classifier" : "language model",
                                            task == "nli" ? "sentence-pair classifier" : "language-model", task));
  return file;
}

// One seed: the command line's, else the file's training seed, else its model's.
void one_seed(const nlohmann::json& file, const std::set<std::string>& given, std::uint64_t& model_seed, std::uint64_t& train_seed) {
  if (given.count("--seed") > 0) return;
  if (file.contains("train") && file["train"].contains("seed")) model_seed = train_seed;
  train_seed = model_seed;
}

}  // namespace

void apply_config_file(const std::string& path, models::LMConfig& model, TrainSettings& train, std::set<std::string>& given) {
  const nlohmann::json file = read_config_file(path, "lm");
  // The settings as the flags and defaults resolved them, with the file's values laid over.
  nlohmann::json m = model;
  std::set<std::string> train_keys = keys_of(TrainSettings{}.to_json());
  train_keys.insert({"train_file", "valid_file", "test_file"});
  nlohmann::json t = train.to_json();
  std::set<std::string> applied = merge(m, file, "model", keys_of(nlohmann::json(models::LMConfig{})), given, path);
  applied.merge(merge(t, file, "train", train_keys, given, path));
  try {
    model = m.get<models::LMConfig>();
    train.read_json(t);
  } catch (const std::exception& e) {  // a value of the wrong type
    throw std::invalid_argument(fmt::format("--config {}: {}", path, e.what()));
  }
  // One block: a training block the file sets is the model's too (as `--block` sets both).
  if (given.count("--block") == 0 && file.contains("train") && file["train"].contains("block")) model.block = train.block;
  one_seed(file, given, model.seed, train.seed);
  given.merge(applied);
}

void apply_config_file(const std::string& path, models::NliConfig& model, NliSettings& train, std::set<std::string>& given) {
  const nlohmann::json file = read_config_file(path, "nli");
  nlohmann::json m = model, t = train.to_json();
  std::set<std::string> applied = merge(m, file, "model", keys_of(nlohmann::json(models::NliConfig{})), given, path);
  applied.merge(merge(t, file, "train", keys_of(NliSettings{}.to_json()), given, path));
  try {
    model = m.get<models::NliConfig>();
    train.read_json(t);
  } catch (const std::exception& e) {  // a value of the wrong type
    throw std::invalid_argument(fmt::format("--config {}: {}", path, e.what()));
  }
  one_seed(file, given, model.seed, train.seed);
  given.merge(applied);
}

nlohmann::json printable_config(const models::LMConfig& model, const TrainSettings& train) {
  return {{"model", model}, {"train", train.to_json()}};
}

nlohmann::json printable_config(const models::NliConfig& model, const NliSettings& train) {
  return {{"task", "nli"}, {"model", model}, {"train", train.to_json()}};
}

}  // namespace wedge::tools
