#include "engine/byte_regex.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <memory>

#include "core/error.h"

namespace tf {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kMaxNfaStates = 200000;  // bounded repeats nested inside one another

// A set of code points as sorted, disjoint, non-adjacent ranges.
using CodeSet = std::vector<std::pair<uint32_t, uint32_t>>;

CodeSet normalized(CodeSet s) {
  std::sort(s.begin(), s.end());
  CodeSet out;
  for (auto r : s) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

CodeSet complement(const CodeSet& s) {
  CodeSet out;
  uint32_t next = 0;
  for (auto [lo, hi] : normalized(s)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

const CodeSet& space_set() {
  static const CodeSet s = normalized({{0x09, 0x0D},
                                       {0x20, 0x20},
                                       {0xA0, 0xA0},
                                       {0x1680, 0x1680},
                                       {0x2000, 0x200A},
                                       {0x2028, 0x2029},
                                       {0x202F, 0x202F},
                                       {0x205F, 0x205F},
                                       {0x3000, 0x3000},
                                       {0xFEFF, 0xFEFF}});
  return s;
}

int encode_utf8(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) return out[0] = static_cast<uint8_t>(cp), 1;
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// The UTF-8 encodings of [lo, hi] (surrogates excluded) as sequences of byte ranges: the range is split
// until, within each piece, every byte position varies independently over a contiguous range.
void utf8_sequences(uint32_t lo, uint32_t hi, const std::function<void(const ByteRanges&)>& emit) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // cut the surrogates out
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, emit);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, emit);
    return;
  }
  for (uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu}) {  // one encoded length per piece
    if (lo <= limit && hi > limit) {
      utf8_sequences(lo, limit, emit);
      utf8_sequences(limit + 1, hi, emit);
      return;
    }
  }
  uint8_t a[4], b[4];
  int n = encode_utf8(lo, a);
  encode_utf8(hi, b);
  for (int i = 1; i < n; ++i) {  // align the low 6*i bits so that trailing bytes span full ranges
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, emit);
        utf8_sequences((lo | m) + 1, hi, emit);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, emit);
        utf8_sequences(hi & ~m, hi, emit);
        return;
      }
    }
  }
  ByteRanges seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  emit(seq);
}

// ---------------------------------------------------------------------------------------------------
// Parsing into a small syntax tree.

struct Ast {
  enum Kind { kSet, kConcat, kAlt, kRepeat } kind = kConcat;
  CodeSet set;
  std::vector<std::unique_ptr<Ast>> kids;
  uint32_t min = 0, max = 0;  // kRepeat; max == UINT32_MAX: unbounded
};
using AstPtr = std::unique_ptr<Ast>;

AstPtr make(Ast::Kind k) {
  auto a = std::make_unique<Ast>();
  a->kind = k;
  return a;
}
AstPtr make_set(CodeSet s) {
  auto a = make(Ast::kSet);
  a->set = normalized(std::move(s));
  return a;
}
AstPtr any_star() {
  auto r = make(Ast::kRepeat);
  r->min = 0, r->max = UINT32_MAX;
  r->kids.push_back(make_set({{0, kMaxCodePoint}}));
  return r;
}

class Parser {
 public:
  Parser(std::string_view p, ByteRegex::Mode mode) : p_(p), mode_(mode) {}

  AstPtr parse() {
    auto alt = make(Ast::kAlt);
    do {
      bool anchored_start = eat('^');
      auto seq = concat(/*top=*/true);
      bool anchored_end = eat('$');
      if (mode_ == ByteRegex::Mode::kSearch) {
        if (!anchored_start) seq->kids.insert(seq->kids.begin(), any_star());
        if (!anchored_end) seq->kids.push_back(any_star());
      }
      alt->kids.push_back(std::move(seq));
    } while (eat('|'));
    if (pos_ < p_.size()) fail(p_[pos_] == ')' ? "an unmatched ')'" : "an unexpected character");
    return alt;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidRequest("pattern \"" + std::string(p_) + "\": " + what + " at offset " +
                         std::to_string(pos_) + " is not supported");
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return at_end() ? '\0' : p_[pos_]; }
  bool eat(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }

  AstPtr alternation() {
    auto alt = make(Ast::kAlt);
    do alt->kids.push_back(concat(false));
    while (eat('|'));
    return alt;
  }

  AstPtr concat(bool top) {
    auto seq = make(Ast::kConcat);
    while (!at_end()) {
      char c = peek();
      if (c == '|' || c == ')') break;
      if (c == '$') {
        if (top && (pos_ + 1 == p_.size() || p_[pos_ + 1] == '|')) break;
        fail("'$' anywhere but at the end of the pattern (or of a top-level alternative)");
      }
      if (c == '^') fail("'^' anywhere but at the start of the pattern (or of a top-level alternative)");
      seq->kids.push_back(quantified(atom()));
    }
    return seq;
  }

  // Parses {n}, {n,} or {n,m} at pos_ ('{'); false (pos_ unchanged) when it is not one.
  bool braces(uint32_t& lo, uint32_t& hi) {
    size_t i = pos_ + 1;
    auto number = [&](uint32_t& v) {
      size_t start = i;
      uint64_t x = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9')
        x = std::min<uint64_t>(x * 10 + uint64_t(p_[i++] - '0'), 1u << 30);
      v = static_cast<uint32_t>(x);
      return i > start;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!number(hi)) hi = UINT32_MAX;
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    pos_ = i + 1;
    return true;
  }

  bool quantifier(uint32_t& lo, uint32_t& hi) {
    char c = peek();
    if (c == '*') return ++pos_, lo = 0, hi = UINT32_MAX, true;
    if (c == '+') return ++pos_, lo = 1, hi = UINT32_MAX, true;
    if (c == '?') return ++pos_, lo = 0, hi = 1, true;
    if (c == '{') {
      if (!braces(lo, hi)) fail("a '{' that does not start a quantifier {n}, {n,} or {n,m}");
      if (lo > hi) fail("a quantifier {n,m} with n > m");
      if (lo > ByteRegex::kMaxRepeat || (hi != UINT32_MAX && hi > ByteRegex::kMaxRepeat))
        fail("a repetition bound above " + std::to_string(ByteRegex::kMaxRepeat));
      return true;
    }
    return false;
  }

  AstPtr quantified(AstPtr a) {
    uint32_t lo, hi;
    if (!quantifier(lo, hi)) return a;
    eat('?');  // lazy: the same language
    uint32_t lo2, hi2;
    if (quantifier(lo2, hi2)) fail("a quantifier following a quantifier");
    auto r = make(Ast::kRepeat);
    r->min = lo, r->max = hi;
    r->kids.push_back(std::move(a));
    return r;
  }

  AstPtr atom() {
    char c = peek();
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    if (c == '(') {
      ++pos_;
      if (eat('?')) {
        if (!eat(':')) fail("a lookaround or named group '(?'");
      }
      auto inner = alternation();
      if (!eat(')')) fail("an unterminated group '('");
      return inner;
    }
    if (c == '[') return make_set(char_class());
    if (c == '.') {
      ++pos_;
      return make_set(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '\\') {
      CodeSet s;
      escape(/*in_class=*/false, s);
      return make_set(std::move(s));
    }
    uint32_t cp = literal();
    return make_set({{cp, cp}});
  }

  uint32_t literal() {  // one UTF-8 encoded code point of the pattern
    auto b = [&](size_t i) { return i < p_.size() ? static_cast<uint8_t>(p_[i]) : 0; };
    uint8_t c = b(pos_);
    int n = c < 0x80                 ? 1
            : c >= 0xC2 && c <= 0xDF ? 2
            : c >= 0xE0 && c <= 0xEF ? 3
            : c >= 0xF0 && c <= 0xF4 ? 4
                                     : 0;
    if (n == 0) fail("invalid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int i = 1; i < n; ++i) {
      if ((b(pos_ + i) & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (b(pos_ + i) & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8");
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0)
        fail(digits == 2 ? "a \\x escape without two hex digits" : "a \\u escape without four hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // An escape at pos_ ('\'): adds its code points to `out`; true when it is a single code point.
  bool escape(bool in_class, CodeSet& out) {
    size_t start = pos_++;
    if (at_end()) fail("a trailing '\\'");
    char c = p_[pos_++];
    auto one = [&](uint32_t cp) { return out.push_back({cp, cp}), true; };
    auto set = [&](const CodeSet& s, bool negate) {
      CodeSet x = negate ? complement(s) : s;
      out.insert(out.end(), x.begin(), x.end());
      return false;
    };
    static const CodeSet kDigit = {{'0', '9'}};
    static const CodeSet kWord = normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
    switch (c) {
      case 'd':
        return set(kDigit, false);
      case 'D':
        return set(kDigit, true);
      case 'w':
        return set(kWord, false);
      case 'W':
        return set(kWord, true);
      case 's':
        return set(space_set(), false);
      case 'S':
        return set(space_set(), true);
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'v':
        return one('\v');
      case 'f':
        return one('\f');
      case 'r':
        return one('\r');
      case 'x':
        return one(hex(2));
      case 'u': {
        uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && p_.substr(pos_, 2) == "\\u") {
          size_t save = pos_;
          pos_ += 2;
          uint32_t lo = hex(4);
          if (lo >= 0xDC00 && lo <= 0xDFFF) return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          pos_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) pos_ = start, fail("a lone surrogate escape");
        return one(v);
      }
      case '0':
        if (peek() >= '0' && peek() <= '9') pos_ = start, fail("an octal escape");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        pos_ = start, fail("a word boundary '\\b'");
      default:
        break;
    }
    pos_ = start;
    if (c >= '1' && c <= '9') fail("a backreference");
    if (c == 'B') fail("a word boundary '\\B'");
    if (c == 'p' || c == 'P') fail("a Unicode property escape");
    if (c == 'k') fail("a named backreference");
    if (c == 'c') fail("a control escape '\\c'");
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x80 || std::isalnum(u) || u < 0x20) fail("an unknown escape");
    pos_ += 2;
    return one(u);  // escaped punctuation stands for itself
  }

  CodeSet char_class() {
    size_t start = pos_++;
    bool negate = eat('^');
    CodeSet s;
    auto item = [&](uint32_t& cp) {  // true: a single code point (stored in cp), else added to s
      if (peek() != '\\') return cp = literal(), true;
      CodeSet tmp;
      bool single = escape(true, tmp);
      if (single) return cp = tmp[0].first, true;
      s.insert(s.end(), tmp.begin(), tmp.end());
      return false;
    };
    while (!at_end() && peek() != ']') {
      uint32_t lo = 0, hi = 0;  // (item sets them; initialised for g++ 12's -Wmaybe-uninitialized)
      bool single = item(lo);
      if (peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        if (!single) fail("a class escape as a range bound");
        ++pos_;
        if (!item(hi)) fail("a class escape as a range bound");
        if (lo > hi) fail("a class range out of order");
        s.push_back({lo, hi});
      } else if (single) {
        s.push_back({lo, lo});
      }
    }
    if (at_end()) pos_ = start, fail("an unterminated class '['");
    ++pos_;
    return negate ? complement(s) : normalized(s);
  }

  std::string_view p_;
  ByteRegex::Mode mode_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------------
// Thompson NFA over bytes, then subset construction.

struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    int to;
  };
  std::vector<std::vector<Edge>> edges;
  std::vector<std::vector<int>> eps;
  const std::string& pattern;

  explicit Nfa(const std::string& p) : pattern(p) {}
  int add() {
    if (edges.size() >= kMaxNfaStates)
      throw InvalidRequest("pattern \"" + pattern + "\" is too large (nested repetitions)");
    edges.emplace_back();
    eps.emplace_back();
    return static_cast<int>(edges.size()) - 1;
  }

  // Adds the automaton of `a` starting at `from`; returns its end state.
  int emit(const Ast& a, int from) {
    switch (a.kind) {
      case Ast::kSet: {
        int end = add();
        for (auto [lo, hi] : a.set) {
          utf8_sequences(lo, hi, [&](const ByteRanges& seq) {
            int cur = from;
            for (size_t i = 0; i < seq.size(); ++i) {
              int next = i + 1 == seq.size() ? end : add();
              edges[size_t(cur)].push_back({seq[i].first, seq[i].second, next});
              cur = next;
            }
          });
        }
        return end;
      }
      case Ast::kConcat:
        for (const auto& k : a.kids) from = emit(*k, from);
        return from;
      case Ast::kAlt: {
        int end = add();
        for (const auto& k : a.kids) {
          int s = add();
          eps[size_t(from)].push_back(s);
          eps[size_t(emit(*k, s))].push_back(end);
        }
        return end;
      }
      case Ast::kRepeat: {
        const Ast& k = *a.kids[0];
        for (uint32_t i = 0; i < a.min; ++i) from = emit(k, from);
        if (a.max == UINT32_MAX) {
          int loop = add();
          eps[size_t(from)].push_back(loop);
          eps[size_t(emit(k, loop))].push_back(loop);
          return loop;
        }
        int end = add();
        for (uint32_t i = a.min; i < a.max; ++i) {
          eps[size_t(from)].push_back(end);
          from = emit(k, from);
        }
        eps[size_t(from)].push_back(end);
        return end;
      }
    }
    return from;
  }

  void close(std::vector<int>& set, std::vector<char>& mark) const {
    std::vector<int> todo = set;
    for (int s : set) mark[size_t(s)] = 1;
    while (!todo.empty()) {
      int s = todo.back();
      todo.pop_back();
      for (int t : eps[size_t(s)])
        if (!mark[size_t(t)]) mark[size_t(t)] = 1, set.push_back(t), todo.push_back(t);
    }
    for (int s : set) mark[size_t(s)] = 0;
    std::sort(set.begin(), set.end());
  }
};

// The subset construction's result, before dead states are dropped. State 0 is the start.
struct RawDfa {
  uint8_t byte_class[256] = {};
  size_t num_classes = 0;
  std::vector<int32_t> table;  // states x classes
  std::vector<char> accepting;
};

RawDfa determinize(Nfa& nfa, int start, int accept) {
  RawDfa dfa;
  // Bytes no edge boundary separates behave alike: one column per class.
  std::vector<char> cut(257, 0);
  for (const auto& es : nfa.edges)
    for (const auto& e : es) cut[e.lo] = 1, cut[size_t(e.hi) + 1] = 1;
  std::vector<uint8_t> rep;  // a byte of each class
  for (int b = 0; b < 256; ++b) {
    if (b == 0 || cut[size_t(b)]) rep.push_back(static_cast<uint8_t>(b));
    dfa.byte_class[b] = static_cast<uint8_t>(rep.size() - 1);
  }
  dfa.num_classes = rep.size();
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  std::vector<char> mark(nfa.edges.size(), 0);
  auto intern = [&](std::vector<int> set) {
    nfa.close(set, mark);
    auto [it, fresh] = ids.emplace(set, static_cast<int>(sets.size()));
    if (fresh) {
      if (sets.size() >= ByteRegex::kMaxStates)
        throw InvalidRequest("pattern \"" + nfa.pattern + "\" needs more than " +
                             std::to_string(ByteRegex::kMaxStates) +
                             " automaton states (simplify it or anchor it with ^ and $)");
      dfa.accepting.push_back(std::binary_search(set.begin(), set.end(), accept));
      sets.push_back(std::move(set));
    }
    return it->second;
  };
  intern({start});
  for (size_t d = 0; d < sets.size(); ++d) {
    for (uint8_t r : rep) {
      std::vector<int> next;
      for (int s : sets[d])
        for (const auto& e : nfa.edges[size_t(s)])
          if (r >= e.lo && r <= e.hi) next.push_back(e.to);
      std::sort(next.begin(), next.end());
      next.erase(std::unique(next.begin(), next.end()), next.end());
      int t = intern(std::move(next));
      dfa.table.push_back(t);  // sets[d] may have moved: index only
    }
  }
  return dfa;
}

// The states from which an accepting one is reachable (breadth-first over reversed transitions).
std::vector<char> live_states(const RawDfa& dfa) {
  const size_t n = dfa.accepting.size(), nc = dfa.num_classes;
  std::vector<std::vector<int>> preds(n);
  for (size_t d = 0; d < n; ++d)
    for (size_t c = 0; c < nc; ++c) preds[size_t(dfa.table[d * nc + c])].push_back(static_cast<int>(d));
  std::vector<char> live(dfa.accepting.begin(), dfa.accepting.end());
  std::vector<int> todo;
  for (size_t d = 0; d < n; ++d)
    if (live[d]) todo.push_back(static_cast<int>(d));
  while (!todo.empty()) {
    int t = todo.back();
    todo.pop_back();
    for (int d : preds[size_t(t)])
      if (!live[size_t(d)]) live[size_t(d)] = 1, todo.push_back(d);
  }
  return live;
}

}  // namespace

ByteRegex ByteRegex::compile(std::string_view pattern, Mode mode) {
  ByteRegex re;
  re.pattern_ = std::string(pattern);
  AstPtr ast = Parser(pattern, mode).parse();
  Nfa nfa(re.pattern_);
  int start = nfa.add();
  int accept = nfa.emit(*ast, start);
  RawDfa dfa = determinize(nfa, start, accept);
  std::vector<char> live = live_states(dfa);
  // Keep the live states only; a transition to any other one becomes kDead.
  const size_t n = dfa.accepting.size(), nc = dfa.num_classes;
  std::vector<int> renum(n, kDead);
  int kept = 0;
  for (size_t d = 0; d < n; ++d)
    if (live[d]) renum[d] = kept++;
  std::copy(std::begin(dfa.byte_class), std::end(dfa.byte_class), re.byte_class_);
  re.num_classes_ = nc;
  re.start_ = renum[0];
  for (size_t d = 0; d < n; ++d) {
    if (!live[d]) continue;
    bool extends = false;
    for (size_t c = 0; c < nc; ++c) {
      int t = renum[size_t(dfa.table[d * nc + c])];
      re.table_.push_back(t);
      extends |= t != kDead;
    }
    re.accepting_.push_back(dfa.accepting[d]);
    re.extends_.push_back(extends);
  }
  return re;
}

int ByteRegex::step(int state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state == kDead) break;
    state = step(state, static_cast<uint8_t>(c));
  }
  return state;
}

int ByteRegex::step_code_point(int state, uint32_t cp) const {
  if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return kDead;
  uint8_t buf[4];
  int len = encode_utf8(cp, buf);
  return step(state, std::string_view(reinterpret_cast<const char*>(buf), static_cast<size_t>(len)));
}

bool ByteRegex::any_live(int state, uint32_t lo, uint32_t hi, const std::function<bool(int)>& ok) const {
  if (state == kDead) return false;
  bool found = false;
  std::vector<char> mark(num_states(), 0);
  utf8_sequences(lo, std::min(hi, kMaxCodePoint), [&](const ByteRanges& seq) {
    if (found) return;
    std::vector<int> cur = {state}, next;
    for (auto [a, b] : seq) {
      next.clear();
      for (int s : cur)
        for (int x = a; x <= b; ++x) {
          int t = step(s, static_cast<uint8_t>(x));
          if (t != kDead && !mark[size_t(t)]) mark[size_t(t)] = 1, next.push_back(t);
        }
      for (int t : next) mark[size_t(t)] = 0;
      cur.swap(next);
      if (cur.empty()) return;
    }
    // Every path spells whole code points and ends in a live state.
    found = !ok || std::any_of(cur.begin(), cur.end(), ok);
  });
  return found;
}

bool ByteRegex::matches(std::string_view utf8) const {
  int s = step(start_, utf8);
  return s != kDead && accepting(s);
}

}  // namespace tf
