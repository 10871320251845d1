#pragma once
// UTF-8 and Unicode helpers shared by the tokenizer pieces (normalizers, pre-tokenizers, models,
// decoders). Semantics follow Rust's str/char where Hugging Face tokenizers relies on them.
#include <cstdint>
#include <string>
#include <string_view>

namespace tf::tok {

// Length in bytes of the UTF-8 sequence that starts with lead byte c (1 for invalid lead bytes).
inline int utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[i] (valid UTF-8 assumed; strings inside the tokenizer always are).
char32_t decode_utf8(std::string_view s, size_t i, int* len);
void append_utf8(std::string& out, char32_t cp);

// Rust char::is_whitespace (Unicode White_Space property).
bool is_whitespace(char32_t c);
// Rust char::is_alphanumeric (alphabetic or numeric), used for single_word added tokens.
bool is_word_char(char32_t c);

// Rust String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);
// Number of trailing bytes of `bytes` that form an incomplete (but so far valid) UTF-8 sequence.
size_t incomplete_utf8_tail(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
char32_t byte_to_char(uint8_t b);
// Inverse; returns -1 for code points outside the alphabet.
int char_to_byte(char32_t c);

// Unicode normalization forms through utf8proc.
enum class NormForm { NFC, NFD, NFKC, NFKD };
std::string unicode_normalize(std::string_view s, NormForm form);
// Rust str::to_lowercase (full case mapping; utf8proc gives the simple mapping, which matches for the
// scripts these vocabularies target, except final sigma which Rust handles contextually).
std::string unicode_lowercase(std::string_view s);

}  // namespace tf::tok
