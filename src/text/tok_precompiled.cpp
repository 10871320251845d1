#include "text/tok_precompiled.h"

#include <utf8proc.h>

#include <cstring>

#include "core/error.h"
#include "text/tok_text.h"

namespace tf::tok {

std::string base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = val(c);
    if (v < 0) continue;  // padding and whitespace
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

PrecompiledCharsMap::PrecompiledCharsMap(const std::string& base64_blob) {
  std::string blob = base64_decode(base64_blob);
  if (blob.size() < 4) throw Error("tokenizer.json: precompiled_charsmap is too short");
  uint32_t trie_bytes;
  std::memcpy(&trie_bytes, blob.data(), 4);  // little endian on every platform we build for
  if (trie_bytes % 4 != 0 || 4 + static_cast<size_t>(trie_bytes) > blob.size())
    throw Error("tokenizer.json: precompiled_charsmap has an invalid trie size");
  units_.resize(trie_bytes / 4);
  std::memcpy(units_.data(), blob.data() + 4, trie_bytes);
  pool_ = blob.substr(4 + trie_bytes);
}

const char* PrecompiledCharsMap::transform(std::string_view chunk) const {
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1) == 1; };
  auto label = [](uint32_t u) { return u & ((1u << 31) | 0xFF); };
  if (units_.empty()) return nullptr;
  size_t node = offset(units_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) return nullptr;
    node ^= c;
    if (node >= units_.size()) return nullptr;
    uint32_t unit = units_[node];
    if (label(unit) != c) return nullptr;
    node ^= offset(unit);
    if (node >= units_.size()) return nullptr;
    if (has_leaf(unit)) {
      size_t at = units_[node] & ((1u << 31) - 1);
      return at < pool_.size() ? pool_.c_str() + at : nullptr;
    }
  }
  return nullptr;
}

std::string PrecompiledCharsMap::normalize(std::string_view s) const {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    // One extended grapheme cluster [i, e).
    utf8proc_int32_t state = 0;
    int len;
    char32_t prev = decode_utf8(s, i, &len);
    size_t e = i + len;
    while (e < s.size()) {
      char32_t c = decode_utf8(s, e, &len);
      if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                           static_cast<utf8proc_int32_t>(c), &state))
        break;
      prev = c;
      e += len;
    }
    std::string_view g = s.substr(i, e - i);
    const char* rep = g.size() < 6 ? transform(g) : nullptr;
    if (rep) {
      out += rep;
    } else {
      for (size_t j = 0; j < g.size(); j += len) {
        decode_utf8(g, j, &len);
        std::string_view ch = g.substr(j, len);
        const char* r = transform(ch);
        if (r) {
          out += r;
        } else {
          out.append(ch);
        }
      }
    }
    i = e;
  }
  return out;
}

}  // namespace tf::tok
