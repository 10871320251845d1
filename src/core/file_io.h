#pragma once
// Whole small files (configs, tokenizers, templates) read as bytes.
#include <filesystem>
#include <optional>
#include <string>

namespace tf {

// The file's bytes; throws Error("cannot read PATH") where it cannot be opened.
std::string read_file(const std::filesystem::path& p);
// The file's bytes, or nullopt where it cannot be opened.
std::optional<std::string> try_read_file(const std::filesystem::path& p);

}  // namespace tf
