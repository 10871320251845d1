#pragma once
// Added tokens (tokenizer.json "added_tokens"): matched in the text before the model runs, leftmost-
// longest like Hugging Face's Aho-Corasick, honouring lstrip / rstrip / single_word. Tokens with
// normalized=false are matched on the raw text, the others on the normalized text.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tf::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool lstrip = false, rstrip = false, normalized = false, single_word = false, special = false;
};

struct Segment {
  std::string text;
  int32_t id = -1;  // added token id, or -1 for text still to tokenize
  bool at_start = false;
};

class AddedTokenMatcher {
 public:
  // `patterns[i]` is what to look for (the content, normalized for normalized tokens).
  void add(const std::string& pattern, const AddedToken* token);
  bool empty() const { return tokens_.empty(); }
  // Splits seg (id == -1) into text segments and token segments, appending to out. With
  // skip_special, special tokens are left in the text (HF's encode_special_tokens).
  void split(Segment seg, std::vector<Segment>& out, bool skip_special = false) const;

 private:
  int32_t child(int32_t node, unsigned char b) const {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | b);
    return it == edges_.end() ? -1 : it->second;
  }
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<const AddedToken*> terminal_{nullptr};  // per trie node
  std::vector<const AddedToken*> tokens_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace tf::tok
