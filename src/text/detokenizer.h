#pragma once
// Streaming decode for token-by-token generation.
#include <cstdint>
#include <memory>
#include <string>

#include "text/tokenizer.h"

namespace tf {

namespace tok {
class DecoderStreamHolder;
}

// Push ids one at a time; each push returns the newly completed text. Never splits a UTF-8 character,
// never drops or doubles one; byte-fallback groups, byte-level bytes and leading-space rules behave as
// in the full decode, so the concatenation of all push() results + flush() == tokenizer.decode(ids).
// Text is held back only while a later token could still change it: an incomplete UTF-8 sequence
// (byte-level vocabularies), an open run of <0xXX> byte-fallback tokens (released by the next other
// token: HF turns the whole run into U+FFFDs if it ends up invalid), and, for tokenizers with
// clean_up_tokenization_spaces, a short tail that may still become " ." etc. Move-only; one per stream.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = true);
  ~IncrementalDetokenizer();
  IncrementalDetokenizer(IncrementalDetokenizer&&) noexcept;
  IncrementalDetokenizer& operator=(IncrementalDetokenizer&&) noexcept;

  std::string push(int32_t id);
  std::string flush();  // text still held back (e.g. a trailing incomplete character as U+FFFD)

 private:
  Tokenizer tok_;
  bool skip_special_;
  std::unique_ptr<tok::DecoderStreamHolder> stream_;
};

}  // namespace tf
