// JsonMatcher: the byte-level incremental matcher over a compiled JsonSchema (json_matcher.h).
#include "engine/json_matcher.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "engine/byte_regex.h"
#include "engine/json_schema_detail.h"

namespace tf {

using namespace json_schema_detail;

// ---------------------------------------------------------------------------------------------------
// Matching. A stack is a header frame (count = frames after it, aux = the whitespace run so far: 0 none,
// 1 a single space, 2 + k a newline and k spaces or tabs) followed
// by its frames, bottom first. Below a kValue frame being expanded there are only containers, so the
// nesting depth is the stack's size.

namespace {

using Frame = JsonMatcher::Frame;
using Stack = std::vector<Frame>;

enum FrameKind : uint8_t {
  kHeader,
  kValue,
  kObjectFrame,
  kKey,
  kArrayFrame,
  kStringFrame,
  kNumberFrame,
  kLiteralFrame
};
// Containers: after '{' / '[', after a key (object), after a value, after ','.
enum ContainerState : uint8_t { kOpen, kAfterKey, kAfterValue, kAfterComma };
enum StringState : uint8_t { kChars, kUtf8, kEscape, kHex, kLowBackslash, kLowU, kLowHex };
enum NumberState : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };
enum StringStep { kReject, kCodePoint, kContinue, kClose };

int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
// A string's code points are counted only while a length bound can still act on the count, so that the
// states inside a free string recur (JsonTokenFilter caches masks by state).
bool counts(const Node& n, uint32_t count) {
  return n.max_length != UINT32_MAX || count < n.min_length;
}
bool number_accepting(uint8_t st) {
  return st == kZero || st == kInt || st == kFrac || st == kExpDigits;
}

// One byte of string content (after the opening quote). kCodePoint: the byte starts a code point.
StringStep string_byte(Frame& f, uint8_t c) {
  switch (f.state) {
    case kChars:
      if (c == '"') return kClose;
      if (c == '\\') return f.state = kEscape, kCodePoint;
      if (c < 0x20) return kReject;
      if (c < 0x80) return kCodePoint;
      // Multi-byte UTF-8: the first continuation byte's range excludes overlongs and surrogates.
      f.utf8_lo = 0x80, f.utf8_hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF)
        f.utf8_need = 1;
      else if (c >= 0xE0 && c <= 0xEF)
        f.utf8_need = 2, f.utf8_lo = c == 0xE0 ? 0xA0 : 0x80, f.utf8_hi = c == 0xED ? 0x9F : 0xBF;
      else if (c >= 0xF0 && c <= 0xF4)
        f.utf8_need = 3, f.utf8_lo = c == 0xF0 ? 0x90 : 0x80, f.utf8_hi = c == 0xF4 ? 0x8F : 0xBF;
      else
        return kReject;
      f.state = kUtf8;
      return kCodePoint;
    case kUtf8:
      if (c < f.utf8_lo || c > f.utf8_hi) return kReject;
      f.utf8_lo = 0x80, f.utf8_hi = 0xBF;
      if (--f.utf8_need == 0) f.state = kChars;
      return kContinue;
    case kEscape:
      if (c == 'u') return f.state = kHex, f.digits = 0, f.aux = 0, kContinue;
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
        return f.state = kChars, kContinue;
      return kReject;
    case kHex: {
      int v = hex_value(c);
      if (v < 0) return kReject;
      f.aux = f.aux * 16 + static_cast<uint32_t>(v);
      // A lone low surrogate is known after two digits ("DC".."DF").
      if (++f.digits == 2 && f.aux >= 0xDC && f.aux <= 0xDF) return kReject;
      if (f.digits == 4) f.state = (f.aux >= 0xD800 && f.aux <= 0xDBFF) ? kLowBackslash : kChars;
      return kContinue;
    }
    case kLowBackslash:
      return c == '\\' ? (f.state = kLowU, kContinue) : kReject;
    case kLowU:
      return c == 'u' ? (f.state = kLowHex, f.digits = 0, kContinue) : kReject;
    case kLowHex: {
      int v = hex_value(c);
      if (v < 0 || (f.digits == 0 && v != 0xD) || (f.digits == 1 && v < 0xC)) return kReject;
      f.aux = f.aux * 16 + static_cast<uint32_t>(v);  // the high surrogate << 16 | the low digits so far
      if (++f.digits == 4) f.state = kChars;
      return kContinue;
    }
  }
  return kReject;
}

// The code point of \uHIGH\uLOW.
uint32_t supplementary(uint32_t high, uint32_t low) {
  return 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
}

// Steps a string's pattern (the DFA state in aux2) over the decoded content: raw bytes as they come, an
// escape's code point once decoded. `before` is the string state before string_byte() took `c`; f.count
// already counts the code point `c` belongs to. False when no completion of the string can match any
// more (within its length bounds; the DFA itself keeps only live states).
bool pattern_step(const StringPattern& p, Frame& f, uint8_t before, uint8_t c, StringStep r) {
  const ByteRegex& re = p.re;
  const int st = static_cast<int>(f.aux2);
  const uint32_t count = f.count;
  auto fits = [&](int t) { return p.fits(t, count); };
  auto go = [&](int t) {
    if (t == ByteRegex::kDead || !fits(t)) return false;
    f.aux2 = static_cast<uint32_t>(t);
    return true;
  };
  // Some code point in [lo, hi] keeps a match reachable.
  auto any = [&](uint32_t lo, uint32_t hi) {
    return p.words ? re.any_live(st, lo, hi, fits) : re.any_live(st, lo, hi);
  };
  // The same for the code points an escape \uXXXX (or a surrogate pair) with digits in [lo, hi] spells.
  auto escape_range = [&](uint32_t lo, uint32_t hi) {
    if (any(lo, hi)) return true;  // the BMP code points (any_live skips surrogates)
    uint32_t a = std::max<uint32_t>(lo, 0xD800), b = std::min<uint32_t>(hi, 0xDBFF);  // high surrogates
    return a <= b && any(supplementary(a, 0xDC00), supplementary(b, 0xDFFF));
  };
  switch (before) {
    case kChars:
      if (r == kClose) return re.accepting(st);
      if (c == '\\') return p.words ? any(0, 0x10FFFF) : re.can_extend(st);  // \uXXXX spells any code point
      return go(re.step(st, c));
    case kUtf8:
      return go(re.step(st, c));
    case kEscape: {
      static constexpr std::pair<char, char> kDecoded[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},
                                                           {'b', '\b'}, {'f', '\f'},  {'n', '\n'},
                                                           {'r', '\r'}, {'t', '\t'}};
      for (auto [e, d] : kDecoded)
        if (c == e) return go(re.step(st, static_cast<uint8_t>(d)));
      return true;  // 'u': checked at the backslash
    }
    case kHex: {
      const uint32_t v = f.aux, d = f.digits;
      if (d < 4) {
        uint32_t lo = v << (4 * (4 - d));
        return escape_range(lo, lo + (1u << (4 * (4 - d))) - 1);
      }
      if (v < 0xD800 || v > 0xDFFF) return go(re.step_code_point(st, v));
      return any(supplementary(v, 0xDC00), supplementary(v, 0xDFFF));  // a high surrogate
    }
    case kLowHex: {
      const uint32_t d = f.digits, high = f.aux >> (4 * d), low = f.aux & ((1u << (4 * d)) - 1);
      if (d == 4) return go(re.step_code_point(st, supplementary(high, low)));
      uint32_t lo = std::max<uint32_t>(low << (4 * (4 - d)), 0xDC00);
      uint32_t hi = std::min<uint32_t>(((low + 1) << (4 * (4 - d))) - 1, 0xDFFF);
      return lo <= hi && any(supplementary(high, lo), supplementary(high, hi));
    }
    default:  // the "\u" of a low surrogate: the high one was checked
      return true;
  }
}

enum NumberStep { kNumReject, kNumConsumed, kNumEnd };
NumberStep number_byte(Frame& f, uint8_t c) {
  bool digit = c >= '0' && c <= '9', int_only = f.flags;
  bool dot = c == '.' && !int_only, exp = (c == 'e' || c == 'E') && !int_only;
  uint8_t next;
  switch (f.state) {
    case kStart:
      next = c == '-' ? kMinus : c == '0' ? kZero : digit ? kInt : 0;
      break;
    case kMinus:
      next = c == '0' ? kZero : digit ? kInt : 0;
      break;
    case kZero:
      next = dot ? kDot : exp ? kExp : 0;
      break;
    case kInt:
      next = digit ? kInt : dot ? kDot : exp ? kExp : 0;
      break;
    case kDot:
      next = digit ? kFrac : 0;
      break;
    case kFrac:
      next = digit ? kFrac : exp ? kExp : 0;
      break;
    case kExp:
      next = (c == '+' || c == '-') ? kExpSign : digit ? kExpDigits : 0;
      break;
    case kExpSign:
      next = digit ? kExpDigits : 0;
      break;
    default:
      next = digit ? kExpDigits : 0;
      break;
  }
  if (next != 0) return f.state = next, kNumConsumed;
  return number_accepting(f.state) ? kNumEnd : kNumReject;
}

Frame make_frame(uint8_t kind, int node, uint8_t state = 0) {
  Frame f;
  f.kind = kind;
  f.node = node;
  f.state = state;
  return f;
}

class Stepper {
 public:
  Stepper(const JsonSchema& schema, std::vector<Frame>& out) : schema_(schema), out_(out) {}

  // Feeds `c` to the stack `s` (scratch, modified); appends every resulting stack to the output.
  void step(Stack& s, uint8_t c) {
    for (;;) {
      if (s.size() == 1) return;  // the document is complete: nothing may follow
      Frame& f = s.back();
      switch (f.kind) {
        case kValue: {
          if (is_json_whitespace(c)) return whitespace(s, c);
          int node = f.node;
          s.pop_back();
          return expand(s, node, c);
        }
        case kStringFrame:
          return string_step(s, c);
        case kKey:
          return key_step(s, c);
        case kNumberFrame: {
          NumberStep r = number_byte(f, c);
          if (r == kNumReject) return;
          if (r == kNumEnd) {
            s.pop_back();
            continue;  // the byte belongs to the enclosing container
          }
          if (f.flags && f.state == kZero) s.pop_back();  // an integer 0 cannot continue
          return emit(s);
        }
        case kLiteralFrame:
          return literal_step(s, c);
        case kObjectFrame:
          return object_step(s, c);
        case kArrayFrame:
          if (!array_step(s, c)) return;
          continue;  // a value starts: the pushed kValue frame takes the byte
      }
      return;
    }
  }

 private:
  const Node& node(int i) const { return schema_.node(i); }

  void emit(Stack& s) {
    s[0].count = static_cast<uint32_t>(s.size() - 1);
    s[0].aux = 0;
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void whitespace(Stack& s, uint8_t c) {
    if (s.size() == 2 && s.back().kind == kValue) return;  // before the top-level value
    const uint32_t aux = s[0].aux;
    uint32_t run;
    if (aux == 0 && (c == ' ' || c == '\n'))
      run = c == ' ' ? 1 : 2;
    else if (aux >= 2 && (c == ' ' || c == '\t') && aux - 2 < uint32_t(JsonSchema::kMaxIndent))
      run = aux + 1;
    else
      return;
    emit(s);
    out_[out_.size() - s.size()].aux = run;
  }

  void expand(Stack& s, int idx, uint8_t c) {
    const Node& n = node(idx);
    if (n.kind == kAnyOf) {  // flattened at compile time: the alternatives are not anyOf nodes
      for (size_t i = 0; i < n.alternatives.size(); ++i) {
        if (i + 1 == n.alternatives.size()) return expand(s, n.alternatives[i], c);
        Stack copy = s;
        expand(copy, n.alternatives[i], c);
      }
      return;
    }
    if (n.kind == kLiteral) return start_literal(s, idx, c);
    bool can_nest = s.size() - 1 < static_cast<size_t>(JsonSchema::kMaxDepth);
    if (c == '"' && (n.types & kString)) {
      s.push_back(make_frame(kStringFrame, idx));
      if (n.pattern) s.back().aux2 = static_cast<uint32_t>(n.pattern->re.start());
      emit(s);
    } else if (c == '{' && (n.types & kObject) && can_nest) {
      s.push_back(make_frame(kObjectFrame, idx, kOpen));
      emit(s);
    } else if (c == '[' && (n.types & kArray) && can_nest) {
      s.push_back(make_frame(kArrayFrame, idx, kOpen));
      emit(s);
    } else if ((c == 't' || c == 'f') && (n.types & kBoolean)) {
      start_literal(s, c == 't' ? kTrueNode : kFalseNode, c);
    } else if (c == 'n' && (n.types & kNull)) {
      start_literal(s, kNullNode, c);
    } else if ((c == '-' || (c >= '0' && c <= '9')) && (n.types & (kNumber | kInteger))) {
      Frame f = make_frame(kNumberFrame, idx, kStart);
      f.flags = !(n.types & kNumber);
      s.push_back(f);
      step(s, c);
    }
  }

  void start_literal(Stack& s, int idx, uint8_t c) {
    Frame f = make_frame(kLiteralFrame, idx);
    size_t n = node(idx).literals.size();
    f.mask = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
    s.push_back(f);
    literal_step(s, c);
  }

  void literal_step(Stack& s, uint8_t c) {
    Frame& f = s.back();
    const auto& lits = node(f.node).literals;
    uint64_t cont = 0, done = 0, ends = 0;
    for (uint64_t m = f.mask; m; m &= m - 1) {
      int i = std::countr_zero(m);
      const std::string& lit = lits[static_cast<size_t>(i)];
      if (lit.size() == f.count)
        done |= uint64_t{1} << i;
      else if (static_cast<uint8_t>(lit[f.count]) == c) {
        cont |= uint64_t{1} << i;
        if (lit.size() == f.count + 1) ends |= uint64_t{1} << i;
      }
    }
    if (done) {  // a literal (a number: "1" beside "12") ended: the byte goes to the container
      Stack copy(s.begin(), s.end() - 1);
      step(copy, c);
    }
    if (!cont) return;
    Frame& g = s.back();  // `f` may be stale after step() (recursion never touches `s`, but be explicit)
    g.mask = cont;
    g.count++;
    if (ends == cont) s.pop_back();  // every candidate is complete: no continuation
    emit(s);
  }

  void string_step(Stack& s, uint8_t c) {
    Frame& f = s.back();
    const Node& n = node(f.node);
    const uint8_t before = f.state;
    const StringStep r = string_byte(f, c);
    switch (r) {
      case kReject:
        return;
      case kCodePoint:
        if (f.count >= n.max_length) return;
        if (counts(n, f.count)) f.count++;
        break;
      case kContinue:
        break;
      case kClose:
        if (f.count < n.min_length) return;
        break;
    }
    if (n.pattern && !pattern_step(*n.pattern, f, before, c, r)) return;
    if (r == kClose) {
      s.pop_back();
      return emit(s);
    }
    if (f.state == kChars) f.aux = 0, f.digits = 0;  // a finished \u escape: let the states recur
    emit(s);
  }

  // Listed keys allowed next: from the next listed index up to the first required one.
  static uint64_t allowed_keys(const Node& n, uint32_t next) {
    uint32_t np = static_cast<uint32_t>(n.props.size());
    if (next >= np) return 0;
    uint32_t last = std::min(n.first_required_from[next], np - 1);
    uint64_t upto = last >= 63 ? ~uint64_t{0} : (uint64_t{1} << (last + 1)) - 1;
    return upto & ~((uint64_t{1} << next) - 1) & n.usable;
  }
  static bool extra_allowed(const Node& n, uint32_t next) {
    return n.additional != kNone &&
           n.first_required_from[std::min<size_t>(next, n.props.size())] == n.props.size();
  }

  void key_step(Stack& s, uint8_t c) {
    Frame& f = s.back();
    Frame& obj = s[s.size() - 2];
    const Node& n = node(f.node);
    uint64_t allowed = allowed_keys(n, obj.count);
    bool extra = extra_allowed(n, obj.count);
    StringStep r = string_byte(f, c);
    if (r == kReject) return;
    if (r == kClose) {
      uint64_t exact = 0;
      for (uint64_t m = f.mask; m; m &= m - 1)
        if (n.props[static_cast<size_t>(std::countr_zero(m))].key.size() == f.count) exact |= m & -m;
      if (exact & allowed)
        obj.aux = static_cast<uint32_t>(std::countr_zero(exact & allowed));
      else if (!exact && extra)
        obj.aux = static_cast<uint32_t>(n.props.size());
      else
        return;
      obj.state = kAfterKey;
      s.pop_back();
      return emit(s);
    }
    uint64_t alive = 0;
    for (uint64_t m = f.mask; m; m &= m - 1) {
      const std::string& key = n.props[static_cast<size_t>(std::countr_zero(m))].key;
      if (key.size() > f.count && static_cast<uint8_t>(key[f.count]) == c) alive |= m & -m;
    }
    if (!extra && !(alive & allowed)) return;
    f.mask = alive;
    f.count++;
    emit(s);
  }

  bool key_possible(const Node& n, uint32_t next) { return allowed_keys(n, next) || extra_allowed(n, next); }

  void object_step(Stack& s, uint8_t c) {
    Frame& f = s.back();
    const Node& n = node(f.node);
    if (is_json_whitespace(c)) return whitespace(s, c);
    size_t np = n.props.size();
    switch (f.state) {
      case kOpen:
      case kAfterComma:
        if (c == '"' && key_possible(n, f.count)) {
          Frame k = make_frame(kKey, f.node, kChars);
          k.mask = np >= 64 ? ~uint64_t{0} : (uint64_t{1} << np) - 1;
          s.push_back(k);
          return emit(s);
        }
        if (c == '}' && f.state == kOpen) return close_object(s, n);
        return;
      case kAfterKey:
        if (c != ':') return;
        {
          f.state = kAfterValue;
          int value = f.aux < np ? n.props[f.aux].node : n.additional;
          f.count = std::min<uint32_t>(f.aux + 1, static_cast<uint32_t>(np));
          s.push_back(make_frame(kValue, value));  // invalidates `f`
          return emit(s);
        }
      case kAfterValue:
        if (c == ',' && key_possible(n, f.count)) return f.state = kAfterComma, emit(s);
        if (c == '}') return close_object(s, n);
        return;
    }
  }

  void close_object(Stack& s, const Node& n) {
    if (n.first_required_from[std::min<size_t>(s.back().count, n.props.size())] < n.props.size()) return;
    s.pop_back();
    emit(s);
  }

  int item_node(const Node& n, uint32_t i) const {
    return i < n.prefix_items.size() ? n.prefix_items[i] : n.items;
  }

  // True when a value starts (a kValue frame was pushed and must take the byte).
  bool array_step(Stack& s, uint8_t c) {
    Frame& f = s.back();
    const Node& n = node(f.node);
    if (is_json_whitespace(c)) return whitespace(s, c), false;
    bool more = f.count < n.max_items && item_node(n, f.count) != kNone;
    if (c == ']' && f.state != kAfterComma) {
      if (f.count < n.min_items) return false;
      s.pop_back();
      return emit(s), false;
    }
    if (f.state == kAfterValue) {
      if (c == ',' && more) f.state = kAfterComma, emit(s);
      return false;
    }
    if (!more) return false;
    f.state = kAfterValue;
    int item = item_node(n, f.count++);
    s.push_back(make_frame(kValue, item));
    return true;
  }

  const JsonSchema& schema_;
  std::vector<Frame>& out_;
};

// Drops stacks equal to an earlier one (anyOf branches that reconverged).
void dedup(std::vector<Frame>& frames, std::vector<Frame>& scratch) {
  scratch.clear();
  std::vector<std::pair<size_t, size_t>> kept;  // small: a handful of stacks
  for (size_t i = 0; i < frames.size();) {
    size_t len = frames[i].count + 1;
    bool seen = std::any_of(kept.begin(), kept.end(), [&](const auto& k) {
      return k.second == len &&
             std::equal(frames.begin() + i + 1, frames.begin() + i + len, scratch.begin() + k.first + 1);
    });
    // Dropping alternatives beyond the cap keeps the matcher sound (each stack alone only accepts
    // completable prefixes); it only narrows what may be generated, for pathological schemas.
    if (!seen && kept.size() < JsonSchema::kMaxStacks) {
      kept.push_back({scratch.size(), len});
      scratch.insert(scratch.end(), frames.begin() + i, frames.begin() + i + len);
    }
    i += len;
  }
  frames.swap(scratch);
}

}  // namespace

namespace {
enum GatePhase : uint32_t { kOpening, kThinking, kAfter };
constexpr uint32_t kMaxGateWhitespace = 4;  // newlines or spaces between the closing marker and the reply
}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonSchema> schema) : schema_(std::move(schema)) {
  frames_.reserve(8);
  if (const JsonSchema::ReasoningGate* g = schema_->gate()) {
    Frame h = make_frame(kHeader, 0);
    h.flags = 3;
    h.aux = g->starts_open ? kThinking : kOpening;
    frames_.push_back(h);
    return;
  }
  start_reply();
}

void JsonMatcher::start_reply() {
  frames_.clear();
  if (const ByteRegex* re = schema_->text()) {
    Frame h = make_frame(kHeader, 0);
    h.flags = 2;
    h.aux2 = static_cast<uint32_t>(re->start());
    frames_.push_back(h);
    return;
  }
  frames_.push_back(make_frame(kHeader, 0));
  frames_.push_back(make_frame(kValue, schema_->root()));
  frames_[0].count = 1;
}

bool JsonMatcher::feed_gate(uint8_t byte) {
  const JsonSchema::ReasoningGate& g = *schema_->gate();
  Frame& h = frames_[0];
  auto reply_from_here = [&] {  // the reply starts with this byte
    const std::vector<Frame> saved = frames_;
    start_reply();
    if (feed(byte)) return true;
    frames_ = saved;
    return false;
  };
  switch (h.aux) {
    case kOpening:
      if (h.aux2 < g.open.size() && static_cast<uint8_t>(g.open[h.aux2]) == byte) {
        if (++h.aux2 == g.open.size()) h.aux = kThinking, h.aux2 = 0;
        return true;
      }
      return h.aux2 == 0 && reply_from_here();
    case kThinking:  // anything; the closing marker's progress (it repeats no proper prefix but its first
                     // byte)
      if (static_cast<uint8_t>(g.close[h.aux2]) == byte) {
        if (++h.aux2 == g.close.size()) h.aux = kAfter, h.aux2 = 0;
      } else {
        h.aux2 = static_cast<uint8_t>(g.close[0]) == byte ? 1 : 0;
      }
      return true;
    default:  // kAfter
      if ((byte == '\n' || byte == ' ') && h.aux2 < kMaxGateWhitespace) {
        ++h.aux2;
        return true;
      }
      return reply_from_here();
  }
}

bool JsonMatcher::feed(uint8_t byte) {
  if (gated()) return feed_gate(byte);
  if (const ByteRegex* re = schema_->text()) {
    const int next = re->step(static_cast<int>(frames_[0].aux2), byte);
    if (next == ByteRegex::kDead) return false;
    frames_[0].aux2 = static_cast<uint32_t>(next);
    return true;
  }
  const std::string& sfx = schema_->suffix();
  if (sfx.empty()) return feed_document(byte);
  if (in_suffix()) {
    const uint32_t pos = frames_[0].aux2;
    if (pos >= sfx.size() || static_cast<uint8_t>(sfx[pos]) != byte) return false;
    frames_[0].aux2++;
    return true;
  }
  if (feed_document(byte)) return true;
  if (!document_complete() || static_cast<uint8_t>(sfx[0]) != byte) return false;
  Frame h = make_frame(kHeader, 0);
  h.flags = 1;
  h.aux2 = 1;
  frames_.assign(1, h);
  return true;
}

bool JsonMatcher::complete() const {
  if (gated()) return false;
  if (const ByteRegex* re = schema_->text()) return re->accepting(static_cast<int>(frames_[0].aux2));
  if (schema_->suffix().empty()) return document_complete();
  return in_suffix() && frames_[0].aux2 == schema_->suffix().size();
}

bool JsonMatcher::dead_end() const {
  if (gated()) return false;
  if (const ByteRegex* re = schema_->text()) {
    const int st = static_cast<int>(frames_[0].aux2);
    return re->accepting(st) && !re->can_extend(st);
  }
  if (schema_->suffix().empty()) return document_dead_end();
  return in_suffix() && frames_[0].aux2 == schema_->suffix().size();
}

bool JsonMatcher::feed_document(uint8_t byte) {
  // Fast path for the common case of the trie walk: plain ASCII inside a string, one alternative.
  if (frames_.size() == frames_[0].count + 1u && frames_.back().kind == kStringFrame &&
      frames_.back().state == kChars && byte >= 0x20 && byte < 0x80 && byte != '"' && byte != '\\') {
    Frame& f = frames_.back();
    const json_schema_detail::Node& n = schema_->node(f.node);
    if (f.count >= n.max_length) return false;
    const uint32_t count = counts(n, f.count) ? f.count + 1 : f.count;
    if (n.pattern) {
      int t = n.pattern->re.step(static_cast<int>(f.aux2), byte);
      if (t == ByteRegex::kDead || !n.pattern->fits(t, count)) return false;
      f.aux2 = static_cast<uint32_t>(t);
    }
    f.count = count;
    return true;
  }
  thread_local std::vector<Frame> out, work, scratch;
  out.clear();
  Stepper stepper(*schema_, out);
  for (size_t i = 0; i < frames_.size(); i += frames_[i].count + 1) {
    work.assign(frames_.begin() + static_cast<std::ptrdiff_t>(i),
                frames_.begin() + static_cast<std::ptrdiff_t>(i + frames_[i].count + 1));
    stepper.step(work, byte);
  }
  if (out.empty()) return false;
  if (out[0].count + 1 != out.size()) dedup(out, scratch);
  frames_.swap(out);  // no copy: the scratch vector keeps the old buffer for the next feed
  return true;
}

bool JsonMatcher::feed(std::string_view bytes) {
  std::vector<Frame> saved = frames_;
  for (char c : bytes) {
    if (!feed(static_cast<uint8_t>(c))) {
      frames_ = std::move(saved);
      return false;
    }
  }
  return true;
}

bool JsonMatcher::document_complete() const {
  for (size_t i = 0; i < frames_.size(); i += frames_[i].count + 1) {
    if (frames_[i].count == 0) return true;
    if (frames_[i].count != 1) continue;
    const Frame& f = frames_[i + 1];
    if (f.kind == kNumberFrame && number_accepting(f.state)) return true;
    if (f.kind == kLiteralFrame)
      for (uint64_t m = f.mask; m; m &= m - 1)
        if (schema_->node(f.node).literals[static_cast<size_t>(std::countr_zero(m))].size() == f.count)
          return true;
  }
  return false;
}

bool JsonMatcher::document_dead_end() const {
  for (size_t i = 0; i < frames_.size(); i += frames_[i].count + 1)
    if (frames_[i].count != 0) return false;
  return !frames_.empty();
}

std::string JsonMatcher::cache_key(uint32_t horizon) const {
  std::string key(state_bytes());
  if (gated() || schema_->text()) return key;
  for (size_t i = 0; i < frames_.size(); ++i) {
    const Frame& f = frames_[i];
    if (f.kind != kStringFrame) continue;
    const Node& n = schema_->node(f.node);
    if (n.pattern || n.max_length == UINT32_MAX)
      continue;  // a pattern's lengths matter; a free string counts nothing
    if (f.count < n.min_length || n.max_length - f.count < horizon) continue;
    Frame folded = f;
    folded.count = UINT32_MAX;
    std::memcpy(key.data() + i * sizeof(Frame), &folded, sizeof(Frame));
  }
  return key;
}

size_t JsonMatcher::num_stacks() const {
  size_t n = 0;
  for (size_t i = 0; i < frames_.size(); i += frames_[i].count + 1) ++n;
  return n;
}

}  // namespace tf
