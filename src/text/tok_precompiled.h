#pragma once
// SentencePiece "precompiled_charsmap" normalizer (T5, XLM-R, ...): a Darts double-array trie over
// UTF-8 byte strings whose values point into a pool of NUL-terminated replacements. Applied per
// grapheme cluster (whole cluster if shorter than 6 bytes and a rule matches, else per character),
// taking the SHORTEST matching rule, exactly like Hugging Face's spm_precompiled.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::tok {

class PrecompiledCharsMap {
 public:
  explicit PrecompiledCharsMap(const std::string& base64_blob);
  std::string normalize(std::string_view s) const;

 private:
  // Replacement for the shortest rule matching a prefix of `chunk`, or nullptr.
  const char* transform(std::string_view chunk) const;
  std::vector<uint32_t> units_;
  std::string pool_;
};

std::string base64_decode(std::string_view in);

}  // namespace tf::tok
