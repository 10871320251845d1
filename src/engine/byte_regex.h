#pragma once
// A regular expression (a subset of ECMA-262 syntax) compiled to a DFA over the UTF-8 bytes of a string,
// for constrained decoding: JSON Schema `pattern` today, a guided regex later. Every transition out of a
// state leads to a state from which an accepting state is still reachable (dead states are pruned), and
// every path of the DFA spells valid UTF-8 (no surrogates), so a live state can always be completed.
//
// Supported subset (anything else throws InvalidRequest naming the construct and the pattern):
//  - literal code points (the pattern is UTF-8); escapes \t \n \v \f \r \0 \xHH \uXXXX (a surrogate pair
//    \uD83D\uDE00 is one code point; lone surrogates are refused), \/ \. \- \\ and every other escaped
//    ASCII punctuation character stands for itself.
//  - \d \D \w \W (ASCII: [0-9], [A-Za-z0-9_], as ECMA-262 without the i flag) and \s \S (ECMA-262's
//    WhiteSpace and LineTerminator: \t \n \v \f \r space U+00A0 U+1680 U+2000-U+200A U+2028 U+2029 U+202F
//    U+205F U+3000 U+FEFF).
//  - classes [...] with ranges, the escapes above and negation [^...] ([] matches nothing, [^] any code
//    point); '.' is any code point but the line terminators \n \r U+2028 U+2029.
//  - alternation |, groups ( ) and (?: ), quantifiers * + ? {n} {n,} {n,m} (n, m <= kMaxRepeat) and their
//    lazy forms (the same language).
//  - ^ only at the start and $ only at the end of a top-level alternative (no multiline mode).
// Characters are code points (like ECMA-262's u flag: '.' matches one emoji, not half a surrogate pair).
// Not supported: backreferences, lookarounds, named groups, \b \B, \p{..}, \cX, flags.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

class ByteRegex {
 public:
  static constexpr int kDead = -1;
  static constexpr uint32_t kMaxRepeat = 64;
  static constexpr size_t kMaxStates = 2000;  // DFA states; more is refused (e.g. "a.{30}" unanchored)

  enum class Mode {
    kSearch,     // JSON Schema / ECMA-262 test(): a match anywhere, unless ^ / $ anchor it
    kFullMatch,  // the whole string must match (guided regex); ^ and $ are allowed and change nothing
  };

  // Throws tf::InvalidRequest for constructs outside the subset, bounds above kMaxRepeat and DFAs with
  // more than kMaxStates states.
  static ByteRegex compile(std::string_view pattern, Mode mode = Mode::kSearch);

  int start() const { return start_; }  // kDead when the language is empty
  // The state after `byte`, or kDead when no accepted string continues this way.
  int step(int state, uint8_t byte) const {
    return table_[static_cast<size_t>(state) * num_classes_ + byte_class_[byte]];
  }
  int step(int state, std::string_view bytes) const;  // kDead once dead
  int step_code_point(int state, uint32_t cp) const;  // its UTF-8 bytes; kDead for surrogates
  bool accepting(int state) const { return accepting_[static_cast<size_t>(state)]; }
  // Some code point can follow (the accepted strings from here are not just the empty one).
  bool can_extend(int state) const { return extends_[static_cast<size_t>(state)]; }
  // Some code point in [lo, hi] (surrogates excepted) leads to a live state (one `ok` holds for, if given).
  bool any_live(int state, uint32_t lo, uint32_t hi, const std::function<bool(int)>& ok = nullptr) const;

  bool matches(std::string_view utf8) const;  // the whole byte string is accepted
  size_t num_states() const { return accepting_.size(); }
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  int start_ = kDead;
  size_t num_classes_ = 1;
  uint8_t byte_class_[256] = {};
  std::vector<int32_t> table_;  // num_states x num_classes
  std::vector<uint8_t> accepting_, extends_;
};

}  // namespace tf
