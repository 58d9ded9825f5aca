#include "data/dataset_errors.h"

#include <fmt/format.h>

#include "engine/text_escape.h"

namespace wedge::data {

std::string how_to_get(std::string_view what) {
  if (what == "WikiText-2")
    return "WikiText-2 (CC BY-SA 3.0) is the folder of wiki.{train,valid,test}.raw (raw release) or "
           "wiki.{train,valid,test}.tokens (tokenized release). With internet access, "
           "tools/download_data.sh DIR downloads both releases and checks their sha256 sums; then pass "
           "--data-dir DIR.";
  if (what == "SNLI")
    return "SNLI 1.0 (CC BY-SA 4.0) is the folder of snli_1.0_{train,dev,test}.jsonl (or the tab-separated "
           "snli_1.0_*.txt). With internet access, tools/download_data.sh DIR downloads snli_1.0.zip, checks "
           "its sha256 sum and unpacks it; then pass --data-dir DIR/snli.";
  return "The BERT-uncased vocabulary is bert-base-uncased-vocab.txt (30,522 lines); tools/download_data.sh DIR "
         "downloads it and checks its sha256 sum. Without internet, train one from your own text with "
         "`wedge vocab train --size N --out vocab.txt FILES...`.";
}

std::string display_path(const std::filesystem::path& path) { return printable(path.string()); }

std::string missing_file_message(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  const char* problem = exists ? "cannot be read" : "not found";
  return fmt::format("{} file {}: {}. {}", what, problem, display_path(path), how_to_get(what));
}

}  // namespace wedge::data
