#pragma once
// Structured outputs at the token level: which vocabulary entries a JsonMatcher accepts next.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/json_matcher.h"
#include "text/tokenizer.h"

namespace tf {

// The vocabulary's token bytes (Tokenizer::token_bytes) sorted as byte strings, so that one pass over them
// is a depth-first walk of their trie: a prefix the matcher refuses skips every token that shares it, and
// matcher states are copied once per trie node visited, not once per token. Built once an engine; used on
// the engine thread only (its mask cache is not locked).
class JsonTokenFilter {
 public:
  // `eos`: the ids that end the reply (allowed exactly when the document is complete).
  JsonTokenFilter(const Tokenizer& tok, int vocab, std::vector<int32_t> eos);

  // mask (resized to the vocabulary): 1 for every id whose bytes `m` accepts as its next bytes, and for the
  // EOS ids once the document is complete. Never all zero: a matcher no token can continue (a vocabulary
  // without some byte the schema needs) gets the EOS ids, and the reply ends there.
  void allowed(const JsonMatcher& m, std::vector<uint8_t>& mask) const;
  // Feeds the bytes of a token that allowed() let through; EOS ids feed nothing. False for any other id.
  bool advance(JsonMatcher& m, int32_t token) const;

 private:
  struct Entry {
    std::string bytes;
    int32_t id;
    uint32_t lcp;  // bytes shared with the previous entry
  };
  int vocab_;
  std::vector<Entry> sorted_;      // tokens with bytes, by bytes then id
  std::vector<int32_t> index_of_;  // id -> entry index, -1 for ids without bytes
  std::vector<int32_t> eos_;
  uint32_t longest_ = 0;  // bytes of the longest entry: no token adds more code points to a string
  // The masks of the last few matcher states, by schema and state: inside a free string every character
  // leads back to the same state, the costliest walk (most of the vocabulary is viable there).
  struct Cached {
    std::shared_ptr<const JsonSchema> schema;  // held: a freed schema's address could come back
    std::string state;
    std::vector<uint8_t> mask;
    uint64_t used = 0;
  };
  static constexpr size_t kCacheEntries = 16;
  mutable std::vector<Cached> cache_;
  mutable uint64_t clock_ = 0;
  void compute(const JsonMatcher& m, std::vector<uint8_t>& mask) const;
};

}  // namespace tf
