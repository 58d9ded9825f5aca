// `wedge train --config FILE` and `--print-config`: a run's settings as one JSON file, shaped
// like the config.json a run folder holds ({"model": {...}, "train": {...}}). The file's
// values take the place of the defaults; a flag given on the command line overrides them.
// A run's own config.json is a valid --config: what it merely records (the data's sha256,
// the vocabulary's, the resolved warm-up, the parent run) is skipped. A key that is no
// setting is an error naming the file and the key (a typo never passes silently).
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "models/lm.h"
#include "tools/nli_task.h"
#include "tools/trainer.h"

namespace wedge::tools {

// Reads FILE and applies it to the model configuration and training settings the flags
// resolved, except where a flag in `given` set the value. Adds to `given` the flag each
// applied key stands for ("--lr" for train.lr), so later checks treat the file's values as
// asked for (a --resume refuses them when they differ from the run's).
// A classifier's configuration (`--task nli`) is refused for a language model and the
// other way round.
void apply_config_file(const std::string& file, models::LMConfig& model, TrainSettings& train, std::set<std::string>& given);
void apply_config_file(const std::string& file, models::NliConfig& model, NliSettings& train, std::set<std::string>& given);

// The configuration as --print-config shows it (and --config reads it back).
nlohmann::json printable_config(const models::LMConfig& model, const TrainSettings& train);
nlohmann::json printable_config(const models::NliConfig& model, const NliSettings& train);

}  // namespace wedge::tools
