#include "text/detokenizer.h"

#include "text/tok_decoder.h"

namespace tf {
namespace tok {
struct TokenizerImpl;
class DecoderStreamHolder {
 public:
  explicit DecoderStreamHolder(Decoder::Stream s) : stream(std::move(s)) {}
  Decoder::Stream stream;
};
// Defined in tokenizer.cpp's impl; accessed through these two helpers to keep the impl private.
const Decoder& decoder_of(const TokenizerImpl& t);
const std::string* token_text_of(const TokenizerImpl& t, int32_t id, bool skip_special);
}  // namespace tok

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok),
      skip_special_(skip_special_tokens),
      stream_(std::make_unique<tok::DecoderStreamHolder>(tok::decoder_of(*tok_.impl_).stream())) {}

IncrementalDetokenizer::~IncrementalDetokenizer() = default;
IncrementalDetokenizer::IncrementalDetokenizer(IncrementalDetokenizer&&) noexcept = default;
IncrementalDetokenizer& IncrementalDetokenizer::operator=(IncrementalDetokenizer&&) noexcept = default;

std::string IncrementalDetokenizer::push(int32_t id) {
  const std::string* s = tok::token_text_of(*tok_.impl_, id, skip_special_);
  return s ? stream_->stream.push(*s) : std::string();
}

std::string IncrementalDetokenizer::flush() {
  return stream_->stream.flush();
}

}  // namespace tf
