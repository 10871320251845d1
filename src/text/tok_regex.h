#pragma once
// PCRE2 (UTF + Unicode properties, JIT) wrapper used for the Split / ByteLevel / Replace patterns of
// tokenizer.json, which Hugging Face evaluates with Oniguruma; the patterns in use are compatible.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::tok {

class Regex {
 public:
  explicit Regex(const std::string& pattern);
  // Non-overlapping matches, left to right, as [begin, end) byte ranges; empty matches are skipped.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<Code> code_;
};

// A pattern in tokenizer.json: {"String": "..."} (literal) or {"Regex": "..."}.
std::string escape_regex(std::string_view literal);

}  // namespace tf::tok
