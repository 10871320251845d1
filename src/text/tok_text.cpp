#include "text/tok_text.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace tf::tok {

char32_t decode_utf8(std::string_view s, size_t i, int* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  int n = utf8_len(p[0]);
  if (i + n > s.size()) n = 1;
  *len = n;
  switch (n) {
    case 1:
      return p[0];
    case 2:
      return ((p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3:
      return ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return ((p[0] & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_whitespace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// Length of the valid UTF-8 sequence at p (n bytes available), 0 if invalid, -k if the k available
// bytes are a valid but incomplete prefix. Follows the Unicode "maximal subpart" rules Rust uses.
static int utf8_seq(const unsigned char* p, size_t n, size_t* invalid_len) {
  unsigned char c = p[0];
  *invalid_len = 1;
  if (c < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= n) return -k;
    unsigned char b = p[k];
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *invalid_len = k;
      return 0;
    }
  }
  return need;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    size_t bad;
    int len = utf8_seq(p + i, n - i, &bad);
    if (len > 0) {
      out.append(bytes.data() + i, len);
      i += len;
    } else if (len < 0) {  // incomplete at the end: one replacement for the whole prefix
      out += "\xEF\xBF\xBD";
      i = n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

size_t incomplete_utf8_tail(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t i = n - back;
    if ((p[i] & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t bad;
    int len = utf8_seq(p + i, back, &bad);
    return len < 0 ? back : 0;
  }
  return 0;
}

bool is_valid_utf8(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    size_t bad;
    int len = utf8_seq(p + i, n - i, &bad);
    if (len <= 0) return false;
    i += len;
  }
  return true;
}

namespace {
struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // code points 0..323 cover the whole alphabet
  ByteMap() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      to_char[b] = c;
      to_byte[c] = static_cast<int16_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

char32_t byte_to_char(uint8_t b) {
  return byte_map().to_char[b];
}
int char_to_byte(char32_t c) {
  return c < 324 ? byte_map().to_byte[c] : -1;
}

static std::string utf8proc_apply(std::string_view s, int options) {
  if (s.empty()) return {};
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw Error(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  return std::string(reinterpret_cast<char*>(out), static_cast<size_t>(n));
}

std::string unicode_normalize(std::string_view s, NormForm form) {
  bool ascii = true;
  for (unsigned char c : s) ascii &= c < 0x80;
  if (ascii) return std::string(s);
  int opts = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::NFC:
      opts |= UTF8PROC_COMPOSE;
      break;
    case NormForm::NFD:
      opts |= UTF8PROC_DECOMPOSE;
      break;
    case NormForm::NFKC:
      opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormForm::NFKD:
      opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  return utf8proc_apply(s, opts);
}

std::string unicode_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int len;
    char32_t c = decode_utf8(s, i, &len);
    i += len;
    if (c == 0x130) {  // Rust: 'İ' lowercases to "i\u0307"
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

}  // namespace tf::tok
