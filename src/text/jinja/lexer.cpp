#include "text/jinja/lexer.h"

#include <cstring>

#include "text/jinja/value.h"

namespace tf::jinja {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

[[noreturn]] void fail(int line, const std::string& msg) {
  throw TemplateError("line " + std::to_string(line) + ": " + msg);
}

int count_newlines(const std::string& s, size_t b, size_t e) {
  int n = 0;
  for (size_t k = b; k < e && k < s.size(); ++k) n += s[k] == '\n';
  return n;
}

// Decodes a string literal body the way jinja2 does (Python unicode-escape).
std::string unescape(const std::string& s, size_t b, size_t e, int line) {
  std::string out;
  for (size_t k = b; k < e; ++k) {
    char c = s[k];
    if (c != '\\' || k + 1 >= e) {
      out += c;
      continue;
    }
    char n = s[++k];
    auto hex = [&](int digits) {
      if (k + digits >= e) fail(line, "truncated escape in string literal");
      char32_t cp = static_cast<char32_t>(std::stoul(s.substr(k + 1, digits), nullptr, 16));
      k += digits;
      utf8_append(out, cp);
    };
    switch (n) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case 'a':
        out += '\a';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\n':
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (n >= '0' && n <= '7') {
          int v = 0, d = 0;
          while (d < 3 && k < e && s[k] >= '0' && s[k] <= '7') v = v * 8 + (s[k++] - '0'), ++d;
          --k;
          utf8_append(out, static_cast<char32_t>(v));
        } else {
          out += '\\';
          out += n;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    while (p_ < s_.size()) {
      size_t open = find_open(p_);
      if (open == std::string::npos) {
        emit_text(s_.substr(p_), count_newlines(s_, p_, s_.size()));
        break;
      }
      char kind = s_[open + 1];
      size_t after = open + 2;
      char sign = 0;
      if (after < s_.size() && (s_[after] == '-' || s_[after] == '+')) sign = s_[after++];
      std::string text = s_.substr(p_, open - p_);
      int text_lines = count_newlines(text, 0, text.size());
      size_t raw_end = kind == '%' ? match_word(after, "raw") : std::string::npos;
      strip_before(text, sign, kind);
      emit_text(std::move(text), text_lines);
      p_ = after;
      if (kind == '#') {
        lex_comment();
      } else if (raw_end != std::string::npos) {
        lex_raw(raw_end);
      } else {
        lex_tag(kind);
      }
    }
    toks_.push_back({TokType::kEof, "", 0, 0, line_});
    return std::move(toks_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = s_.find('{', from); k != std::string::npos; k = s_.find('{', k + 1)) {
      if (k + 1 < s_.size() && (s_[k + 1] == '{' || s_[k + 1] == '%' || s_[k + 1] == '#')) return k;
    }
    return std::string::npos;
  }

  // If `\s*word\s*` followed by an optional sign and `%}` starts at `at`, returns the index after `%}`.
  size_t match_word(size_t at, const char* word) const {
    size_t k = at;
    while (k < s_.size() && is_ws(s_[k])) ++k;
    size_t wl = std::strlen(word);
    if (s_.compare(k, wl, word) != 0) return std::string::npos;
    k += wl;
    if (k < s_.size() && (isalnum(static_cast<unsigned char>(s_[k])) || s_[k] == '_'))
      return std::string::npos;
    while (k < s_.size() && is_ws(s_[k])) ++k;
    if (k < s_.size() && (s_[k] == '-' || s_[k] == '+')) ++k;
    if (s_.compare(k, 2, "%}") != 0) return std::string::npos;
    return k + 2;
  }

  void strip_before(std::string& text, char sign, char kind) const {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0 && is_ws(text[e - 1])) --e;
      text.resize(e);
    } else if (sign != '+' && kind != '{') {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
        bool all_ws = true;
        for (size_t k = l_pos; k < text.size(); ++k) all_ws = all_ws && is_ws(text[k]);
        if (all_ws) text.resize(l_pos);
      }
    }
  }

  void emit_text(std::string text, int newlines) {
    if (!text.empty()) toks_.push_back({TokType::kText, std::move(text), 0, 0, line_});
    line_ += newlines;
  }

  // After a closing delimiter: `-` strips all whitespace, plain block/comment ends eat one newline.
  void strip_after(char sign, bool is_block) {
    size_t start = p_;
    if (sign == '-') {
      while (p_ < s_.size() && is_ws(s_[p_])) ++p_;
    } else if (sign != '+' && is_block && p_ < s_.size() && s_[p_] == '\n') {
      ++p_;
    }
    line_ += count_newlines(s_, start, p_);
    line_starting_ = p_ > start && s_[p_ - 1] == '\n';
  }

  void lex_comment() {
    size_t end = s_.find("#}", p_);
    if (end == std::string::npos) fail(line_, "missing end of comment tag");
    char sign = end > p_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    line_ += count_newlines(s_, p_, end);
    p_ = end + 2;
    line_starting_ = false;
    strip_after(sign, true);
  }

  void lex_raw(size_t body) {
    char open_sign = s_[body - 3];
    p_ = body;
    if (open_sign == '-') strip_after('-', true);
    for (size_t k = find_open(p_); k != std::string::npos; k = find_open(k + 1)) {
      if (s_[k + 1] != '%') continue;
      size_t a = k + 2;
      char sign = a < s_.size() && (s_[a] == '-' || s_[a] == '+') ? s_[a++] : 0;
      size_t end = match_word(a, "endraw");
      if (end == std::string::npos) continue;
      std::string text = s_.substr(p_, k - p_);
      int lines = count_newlines(text, 0, text.size());
      strip_before(text, sign, '%');
      emit_text(std::move(text), lines);
      line_ += count_newlines(s_, k, end);
      p_ = end;
      line_starting_ = false;
      strip_after(s_[end - 3], true);
      return;
    }
    fail(line_, "missing {% endraw %}");
  }

  void lex_tag(char kind) {
    bool block = kind == '%';
    char close = block ? '%' : '}';
    toks_.push_back({block ? TokType::kBlockBegin : TokType::kVarBegin, "", 0, 0, line_});
    int depth = 0;
    for (;;) {
      while (p_ < s_.size() && is_ws(s_[p_])) line_ += s_[p_++] == '\n';
      if (p_ >= s_.size()) fail(line_, std::string("unexpected end of template, expected '") + close + "}'");
      char sign = 0;
      size_t q = p_;
      if (s_[q] == '-' || s_[q] == '+') sign = s_[q++];
      if ((block || depth == 0) && q + 1 < s_.size() && s_[q] == close && s_[q + 1] == '}') {
        p_ = q + 2;
        toks_.push_back({block ? TokType::kBlockEnd : TokType::kVarEnd, "", 0, 0, line_});
        line_starting_ = false;
        strip_after(sign, block);
        return;
      }
      lex_token(depth);
    }
  }

  void lex_token(int& depth) {
    char c = s_[p_];
    if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = p_;
      while (p_ < s_.size() && (isalnum(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) ++p_;
      toks_.push_back({TokType::kName, s_.substr(b, p_ - b), 0, 0, line_});
    } else if (isdigit(static_cast<unsigned char>(c))) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      size_t b = ++p_;
      while (p_ < s_.size() && s_[p_] != c) p_ += s_[p_] == '\\' ? 2 : 1;
      if (p_ >= s_.size()) fail(line_, "unterminated string literal");
      int start_line = line_;
      line_ += count_newlines(s_, b, p_);
      toks_.push_back({TokType::kString, unescape(s_, b, p_, start_line), 0, 0, start_line});
      ++p_;
    } else {
      static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
      for (const char* op : two) {
        if (s_.compare(p_, 2, op) == 0) {
          toks_.push_back({TokType::kOp, op, 0, 0, line_});
          p_ += 2;
          return;
        }
      }
      if (!std::strchr("+-*/%~<>=.,:|()[]{}", c))
        fail(line_, std::string("unexpected character '") + c + "'");
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      toks_.push_back({TokType::kOp, std::string(1, c), 0, 0, line_});
      ++p_;
    }
  }

  void lex_number() {
    size_t b = p_;
    auto digits = [&] {
      while (p_ < s_.size() && (isdigit(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) ++p_;
    };
    digits();
    bool is_float = false;
    if (p_ + 1 < s_.size() && s_[p_] == '.' && isdigit(static_cast<unsigned char>(s_[p_ + 1]))) {
      is_float = true;
      ++p_;
      digits();
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      size_t q = p_ + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && isdigit(static_cast<unsigned char>(s_[q]))) {
        is_float = true;
        p_ = q;
        digits();
      }
    }
    std::string text;
    for (size_t k = b; k < p_; ++k)
      if (s_[k] != '_') text += s_[k];
    Token t{is_float ? TokType::kFloat : TokType::kInt, text, 0, 0, line_};
    if (is_float)
      t.fval = std::stod(text);
    else
      t.ival = std::stoll(text);
    toks_.push_back(std::move(t));
  }

  std::string s_;
  size_t p_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  // jinja2 normalises newlines to \n and drops one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).run();
}

}  // namespace tf::jinja
