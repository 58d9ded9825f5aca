// config.json of a run folder: the text `wedge eval`, `generate`, `classify` and
// `train --resume` read, turned into the model configuration and training settings the way
// the run loaders do (tools/trainer.cpp load_run, tools/nli_task.cpp is_nli_run and
// load_nli_run): the task, the "model" object through models::from_json, the "train" object
// through CorpusSpec::read_from or NliSettings::from_json, then the model's validation.
//
// Expected outcomes for bad input: nlohmann::json::exception (malformed JSON, a missing
// object, a field of the wrong type; the loaders wrap it in an error naming the file) and
// std::invalid_argument (validate(): a value out of range, naming the flag). A configuration
// that passes is written back to JSON and read again unchanged, and, when its sizes are
// small, the model is built from it as the loaders do next.
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

#include "fuzz_support.h"
#include "models/lm.h"
#include "models/nli.h"
#include "tools/corpus.h"
#include "tools/nli_task.h"

using namespace wedge;

namespace {

bool small(const models::LMConfig& c) {
  return c.vocab_size <= 64 && c.layers <= 2 && c.d_model <= 16 && c.d_ff <= 32 && c.heads <= 16 &&
         c.block <= 32 && c.rank <= 8 && c.windows.size() <= 8 && c.window_schedule.size() <= 2 && c.patch <= 16 &&
         c.types <= 4 && c.state_size <= 8 && c.section_dim <= 16 && c.expert_d_ff <= 32;
}

bool small(const models::NliConfig& c) {
  return c.vocab_size <= 64 && c.layers <= 2 && c.d_model <= 16 && c.heads <= 16 && c.d_ff <= 32 &&
         c.max_length <= 16 && c.d_proj <= 16 && c.mixing_heads <= 8 && c.window <= 16 && c.patch <= 16 &&
         c.types <= 4 && c.state_size <= 8 && c.section_dim <= 16;
}

void read_language_model_run(const nlohmann::json& j) {
  const models::LMConfig config = j.at("model").get<models::LMConfig>();
  const tools::CorpusSpec corpus = tools::CorpusSpec::read_from(j.at("train"));
  (void)corpus;
  config.validate();
  const nlohmann::json written = config;
  FUZZ_CHECK(nlohmann::json(written.get<models::LMConfig>()) == written);
  if (small(config)) FUZZ_CHECK(models::make_model(config)->config().model == config.model);
}

void read_classifier_run(const nlohmann::json& j) {
  const models::NliConfig config = j.at("model").get<models::NliConfig>();
  const tools::NliSettings settings = tools::NliSettings::from_json(j.at("train"));
  FUZZ_CHECK(tools::NliSettings::from_json(settings.to_json()).to_json() == settings.to_json());
  config.validate();
  const nlohmann::json written = config;
  FUZZ_CHECK(nlohmann::json(written.get<models::NliConfig>()) == written);
  if (small(config)) FUZZ_CHECK(models::make_nli_model(config) != nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const nlohmann::json j = nlohmann::json::parse(data, data + size);
    bool nli = false;
    try {  // is_nli_run: a config it cannot read is not a classifier's
      nli = j.value("task", std::string()) == "nli";
    } catch (const nlohmann::json::exception&) {
    }
    if (nli) read_classifier_run(j);
    else read_language_model_run(j);
  } catch (const nlohmann::json::exception&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
