// Error messages for data that is not where the user said it is. Each names the path and
// says how to get the data, because "file not found" alone leaves a new user stuck.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace wedge::data {

// `what` is "vocabulary", "WikiText-2" or "SNLI"; the message names the path and explains
// how to obtain that dataset.
std::string missing_file_message(const std::filesystem::path& path, std::string_view what);

// A path as a message shows it: printable() of its text (engine/text_escape.h), so a file
// name cannot carry terminal escapes or line breaks into a message.
std::string display_path(const std::filesystem::path& path);

// How to get a dataset, one paragraph (used by the message above and by `wedge data stats`).
std::string how_to_get(std::string_view what);

}  // namespace wedge::data
