#pragma once
// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (regex or literal, all five behaviours,
// invert), ByteLevel (add_prefix_space, use_regex; maps bytes to the GPT-2 alphabet), Metaspace
// (prepend_scheme, split), Digits, Whitespace, WhitespaceSplit, Punctuation-free subset, Sequence.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tf::tok {

struct Piece {
  std::string text;
  bool at_start = false;  // starts at offset 0 of the original input (Metaspace prepend_scheme "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their finer split.
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& cfg);

// The GPT-2 split pattern ByteLevel uses when use_regex is true.
extern const char* const kGpt2Pattern;

}  // namespace tf::tok
