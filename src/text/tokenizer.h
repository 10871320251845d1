#pragma once
// Hugging Face tokenizer.json in C++: encode/decode identical to the `tokenizers` library (and to
// transformers' tokenizer(...) / decode(...)) for BPE (byte-level and SentencePiece-style with byte
// fallback) and Unigram models, with normalizers, pre-tokenizers, added/special tokens,
// post-processors and decoders as configured in the file.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

namespace tok {
struct TokenizerImpl;
}

class Tokenizer {  // cheap to copy (shared immutable impl); thread-safe
 public:
  // Reads dir/tokenizer.json (or tokenizer.json.gz) and dir/tokenizer_config.json if present.
  static Tokenizer load(const std::string& dir);
  static Tokenizer from_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json);

  // = tokenizer(text, add_special_tokens=...)["input_ids"]. Invalid UTF-8 bytes are replaced by U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // split_special_tokens = true: special tokens written in the text are tokenized as plain text
  // (transformers' split_special_tokens / tokenizers' encode_special_tokens), e.g. for user content.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                              bool split_special_tokens) const;
  // = tokenizer.decode(ids, skip_special_tokens=...). Unknown ids are skipped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  int32_t vocab_size() const;  // incl. added tokens (max id + 1)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // raw vocab piece; empty for unknown ids
  bool is_special(int32_t id) const;
  // The bytes vocabulary entry `id` adds to a decoded text (Decoder::token_bytes; an added token's content
  // goes through the decoder as in decode()); nullopt for special tokens and unknown ids. Structured
  // outputs match these.
  std::optional<std::string> token_bytes(int32_t id) const;

  // From tokenizer_config.json (strings or AddedToken dicts); empty if absent.
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  const std::string& pad_token() const;
  const std::string& unk_token() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  const nlohmann::json& config() const;  // tokenizer_config.json (empty object if none)

 private:
  friend class IncrementalDetokenizer;
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tok::TokenizerImpl> impl_;
};

}  // namespace tf
