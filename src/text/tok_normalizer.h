#pragma once
// Normalizers of tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace,
// Precompiled (SentencePiece charsmap) and Sequence. Offsets are not tracked: only the text matters.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tf::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

// Null for a null/absent config. Throws tf::Error naming unsupported types.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& cfg);

}  // namespace tf::tok
