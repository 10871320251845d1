// ByteRegex against Python's `re` (one live process): search and full-match verdicts on hand-written,
// random and DFA-generated strings, completions of every live prefix, and the refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "engine/byte_regex.h"

namespace tf {
namespace {

using json = nlohmann::json;

// The patterns stay inside the part of the syntax where ECMA-262 and Python agree once the oracle
// rewrites \s \S . $ and uses re.ASCII (for \d \w); see kPython below.
const char* const kPatterns[] = {
    R"(^\d{4}-\d{2}-\d{2}$)",
    R"(^[A-Z]{3}-[0-9]+$)",
    R"(cat|dog)",
    R"(^[a-z]+$)",
    R"(abc)",
    R"(^(?:[01]\d|2[0-3]):[0-5]\d$)",
    R"(^\+?[0-9 ()-]{7,15}$)",
    R"(^[^@\s]+@[^@\s]+\.[a-z]{2,}$)",
    R"(^\w+$)",
    R"(\W)",
    R"(^\S+$)",
    R"(\s)",
    R"(^.{2,4}$)",
    R"(^[^a-c]*$)",
    R"((ab)+c?$)",
    R"(^(a|b)*abb$)",
    R"(x{2,}y)",
    "^[\u03b1-\u03c9]+$",
    R"(^[\u4e00-\u9fff]{1,3}$)",
    R"([^\x00-\x7F])",
    R"(^(?:\d+(?:\.\d+)?)$)",
    R"(^[\w.-]+$)",
    R"(^a*?b+?$)",
    R"(^$)",
    R"(colou?r)",
    R"(^https?://[a-z0-9.]+(?:/[\w-]*)*$)",
    R"(^[^\n]*\n[^\n]*$)",
    "\U0001F600+",
    R"(^\u00e9t\u00e9$)",
    R"(^(?:[0-9a-f]{2}:){3}[0-9a-f]{2}$)",
    R"(a.c)",
    R"(^[\]\-\\]+$)",
    R"(^[a-z]+|[0-9]+$)",
    R"(^\/\.\*$)",
    R"(^[^\d\s]{0,3}$)",
};

// Rewrites an ECMA-262 pattern of the subset above into Python syntax with the same meaning.
const char* const kPython = R"PY(
import json, re, sys
WS = "\\t\\n\\x0b\\x0c\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
def translate(p):
    out, i, in_class = [], 0, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            e = p[i + 1]
            if e == "s": out.append(WS if in_class else "[" + WS + "]")
            elif e == "S":
                assert not in_class
                out.append("[^" + WS + "]")
            else: out.append(p[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]": in_class = False
        elif c == "[":
            in_class = True
            out.append(c)
            if p[i + 1] == "^":
                out.append("^"); i += 1
            i += 1
            continue
        elif c == ".": c = "[^\\n\\r\\u2028\\u2029]"
        elif c == "$": c = "\\Z"
        out.append(c)
        i += 1
    return "".join(out)
req = json.load(open(sys.argv[1], encoding="utf-8"))
pats = [re.compile(translate(p), re.ASCII) for p in req["patterns"]]
out = [[bool(pats[c[0]].search(c[1])), bool(pats[c[0]].fullmatch(c[1]))] for c in req["checks"]]
json.dump(out, open(sys.argv[2], "w"))
)PY";

json run_python(const json& request) {
  std::string base = std::string(TF_BINARY_DIR) + "/byte_regex_oracle_" + std::to_string(::getpid());
  std::ofstream(base + ".py") << kPython;
  std::ofstream(base + ".in.json") << request.dump();
  std::string cmd = std::string(TF_PYTHON) + " " + base + ".py " + base + ".in.json " + base + ".out.json";
  int rc = std::system(cmd.c_str());
  std::ifstream out(base + ".out.json");
  std::stringstream text;
  text << out.rdbuf();
  for (const char* ext : {".py", ".in.json", ".out.json"}) std::remove((base + ext).c_str());
  EXPECT_EQ(rc, 0) << cmd;
  return rc == 0 ? json::parse(text.str()) : json::array();
}

// The shortest bytes leading from `st` to an accepting state (breadth-first over the DFA).
std::string completion(const ByteRegex& re, int st) {
  std::vector<int> prev(re.num_states(), -2), via(re.num_states(), 0);
  std::vector<int> queue = {st};
  prev[size_t(st)] = -1;
  for (size_t q = 0; q < queue.size(); ++q) {
    int s = queue[q];
    if (re.accepting(s)) {
      std::string out;
      for (int x = s; prev[size_t(x)] != -1; x = prev[size_t(x)])
        out.insert(out.begin(), static_cast<char>(via[size_t(x)]));
      return out;
    }
    for (int b = 0; b < 256; ++b) {
      int t = re.step(s, static_cast<uint8_t>(b));
      if (t != ByteRegex::kDead && prev[size_t(t)] == -2)
        prev[size_t(t)] = s, via[size_t(t)] = b, queue.push_back(t);
    }
  }
  return "<none>";
}

// A random string the DFA accepts (any live byte, stopping at accepting states now and then;
// past max_len, the shortest way to an accepting state).
std::string random_accepted(const ByteRegex& re, std::mt19937& rng, size_t max_len) {
  std::string s;
  int st = re.start();
  while (true) {
    std::vector<uint8_t> next;
    for (int b = 0; b < 256; ++b)
      if (re.step(st, static_cast<uint8_t>(b)) != ByteRegex::kDead) next.push_back(static_cast<uint8_t>(b));
    if (re.accepting(st) && (next.empty() || rng() % 4 == 0 || s.size() >= max_len)) return s;
    if (next.empty()) return s;  // unreachable: live states extend or accept
    if (s.size() >= max_len) return s + completion(re, st);
    uint8_t b = next[rng() % next.size()];
    s += static_cast<char>(b);
    st = re.step(st, b);
  }
}

bool boundary(const std::string& s, size_t i) {
  return i == s.size() || (static_cast<uint8_t>(s[i]) & 0xC0) != 0x80;
}

TEST(ByteRegexOracle, AgreesWithPythonRe) {
  const char* const kAlphabet[] = {
      "a",      "b",      "c",      "x", "y",  "Z", "A",  "0",      "1",      "9",      "-",
      ":",      ".",      "@",      " ", "\n", "_", "/",  "\u00e9", "\u03b2", "\u4e2d", "\U0001F600",
      "\u00a0", "\u2028", "\ufeff", "+", "(",  "]", "\\", "*",      "t"};
  std::mt19937 rng(1130);
  json request = {{"patterns", json::array()}, {"checks", json::array()}};
  std::vector<ByteRegex> search, full;
  std::vector<std::string> expect_match;  // "s": search must match, "f": fullmatch must, "": unknown
  for (const char* p : kPatterns) {
    request["patterns"].push_back(p);
    search.push_back(ByteRegex::compile(p, ByteRegex::Mode::kSearch));
    full.push_back(ByteRegex::compile(p, ByteRegex::Mode::kFullMatch));
  }
  auto check = [&](size_t i, const std::string& s, const char* must) {
    request["checks"].push_back({i, s});
    expect_match.push_back(must);
  };
  for (size_t i = 0; i < search.size(); ++i) {
    // Letters of the pattern itself make matches likely; the alphabet adds non-ASCII and separators.
    std::vector<std::string> letters(std::begin(kAlphabet), std::end(kAlphabet));
    for (char c : std::string(kPatterns[i]))
      if (c > 0x20 && c < 0x7F) letters.push_back(std::string(1, c));
    for (int k = 0; k < 60; ++k) {
      std::string s;
      for (size_t n = rng() % 10; n > 0; --n) s += letters[rng() % letters.size()];
      check(i, s, "");
    }
    for (const auto* re : {&search[i], &full[i]}) {
      if (re->start() == ByteRegex::kDead) continue;
      for (int k = 0; k < 25; ++k) {
        std::string s = random_accepted(*re, rng, 12);
        check(i, s, re == &search[i] ? "s" : "f");
        // Every live prefix (at code point boundaries) completes to a match.
        int st = re->start();
        for (size_t j = 0; j < s.size(); ++j) {
          st = re->step(st, static_cast<uint8_t>(s[j]));
          if (boundary(s, j + 1))
            check(i, s.substr(0, j + 1) + completion(*re, st), re == &search[i] ? "s" : "f");
        }
        if (!s.empty()) {  // a mutant: mostly rejected
          std::string m = s;
          size_t at = rng() % m.size();
          while (!boundary(m, at)) --at;
          size_t len = 1;
          while (!boundary(m, at + len)) ++len;
          m.replace(at, len, letters[rng() % letters.size()]);
          check(i, m, "");
        }
      }
    }
  }
  json reply = run_python(request);
  ASSERT_EQ(reply.size(), request["checks"].size());
  size_t matches = 0, rejects = 0;
  for (size_t c = 0; c < reply.size(); ++c) {
    size_t i = request["checks"][c][0].get<size_t>();
    std::string s = request["checks"][c][1].get<std::string>();
    bool py_search = reply[c][0].get<bool>(), py_full = reply[c][1].get<bool>();
    EXPECT_EQ(search[i].matches(s), py_search) << kPatterns[i] << " search " << json(s).dump();
    EXPECT_EQ(full[i].matches(s), py_full) << kPatterns[i] << " fullmatch " << json(s).dump();
    if (expect_match[c] == "s") {
      EXPECT_TRUE(py_search) << kPatterns[i] << " " << json(s).dump();
    } else if (expect_match[c] == "f") {
      EXPECT_TRUE(py_full) << kPatterns[i] << " " << json(s).dump();
    }
    matches += py_search;
    rejects += !py_search;
  }
  EXPECT_GT(rejects, reply.size() / 10);
  EXPECT_GT(matches, reply.size() / 3);
  std::printf("%zu patterns, %zu checks against Python re: %zu search matches, %zu rejects\n",
              std::size(kPatterns), reply.size(), matches, rejects);
}

TEST(ByteRegex, AnyLiveAgreesWithSteppingEachCodePoint) {
  std::mt19937 rng(7);
  const uint32_t kEdges[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  for (const char* p :
       {"^[\u03b1-\u03c9]+$", "^[^a-c]*$", "\U0001F600+", R"(^[\u4e00-\u9fff]{1,3}$)", "^a.b$"}) {
    ByteRegex re = ByteRegex::compile(p);
    for (int k = 0; k < 40; ++k) {
      uint32_t lo = kEdges[rng() % std::size(kEdges)] + rng() % 3,
               len = rng() % 3 == 0 ? 0x2000 : rng() % 300;
      if (k % 2) lo = 0x3A0 + rng() % 0x60;  // around the Greek letters
      if (k % 5 == 0) lo = 0x1F5F0 + rng() % 0x20;
      uint32_t hi = std::min<uint32_t>(lo + len, 0x10FFFF);
      bool brute = false;
      for (uint32_t cp = lo; cp <= hi && !brute; ++cp)
        brute = re.step_code_point(re.start(), cp) != ByteRegex::kDead;
      EXPECT_EQ(re.any_live(re.start(), lo, hi), brute) << p << " [" << lo << ", " << hi << "]";
    }
  }
}

TEST(ByteRegex, AnyLiveWithAPredicateOnTheState) {
  ByteRegex two = ByteRegex::compile("^[a-z\u00e9]{2}$"), one = ByteRegex::compile("^[a-z\u00e9]$");
  auto accepting = [](const ByteRegex& re) { return [&re](int t) { return re.accepting(t); }; };
  EXPECT_TRUE(two.any_live(two.start(), 0, 0x10FFFF));
  EXPECT_FALSE(two.any_live(two.start(), 0, 0x10FFFF, accepting(two)));
  EXPECT_TRUE(one.any_live(one.start(), 'z', 0xFF, accepting(one)));
  EXPECT_TRUE(one.any_live(one.start(), 0xE9, 0xE9, accepting(one)));
  EXPECT_FALSE(one.any_live(one.start(), 0xEA, 0x10FFFF, accepting(one)));
}

TEST(ByteRegex, StatesAreLiveAndCodePointsValid) {
  ByteRegex re = ByteRegex::compile("^[^a]$");
  int st = re.start();
  EXPECT_NE(re.step(st, 0xED), ByteRegex::kDead);
  EXPECT_EQ(re.step(re.step(st, 0xED), 0xA0), ByteRegex::kDead);  // a surrogate's encoding
  EXPECT_NE(re.step(re.step(st, 0xED), 0x9F), ByteRegex::kDead);
  EXPECT_EQ(re.step(st, 0xC0), ByteRegex::kDead);  // overlong lead
  EXPECT_EQ(re.step(st, 0xF5), ByteRegex::kDead);
  EXPECT_EQ(re.step(st, 'a'), ByteRegex::kDead);
  int b = re.step(st, 'b');
  EXPECT_TRUE(re.accepting(b));
  EXPECT_FALSE(re.can_extend(b));
  EXPECT_EQ(ByteRegex::compile("[^\\s\\S]").start(), ByteRegex::kDead);  // matches nothing
  EXPECT_TRUE(ByteRegex::compile("").matches("anything"));
  EXPECT_TRUE(ByteRegex::compile("[]|x").matches("x"));
  EXPECT_FALSE(ByteRegex::compile("^[]$").matches(""));
  EXPECT_TRUE(ByteRegex::compile("^[^]$").matches("\U0001F600"));
  EXPECT_TRUE(ByteRegex::compile("^.$").matches("\U0001F600"));  // code points, not UTF-16 units
  // A surrogate pair escape is one code point (Python's re would see two): ECMA-262's reading.
  EXPECT_TRUE(ByteRegex::compile(R"(^\uD83D\uDE00?x$)").matches("\U0001F600x"));
  EXPECT_FALSE(ByteRegex::compile(R"(^\uD83D\uDE00?x$)").matches("\U0001F600\U0001F600x"));
  EXPECT_LE(ByteRegex::compile(R"(^\d{4}-\d{2}-\d{2}$)").num_states(), 12u);
}

TEST(ByteRegex, RefusesWhatItDoesNotSupport) {
  const std::pair<const char*, const char*> kCases[] = {
      {"(?=a)b", "lookaround"},
      {"(?!a)b", "lookaround"},
      {"(?<=a)b", "lookaround"},
      {"(?<n>a)", "named group"},
      {"(a)\\1", "backreference"},
      {"\\bword", "word boundary"},
      {"a\\Bb", "word boundary"},
      {"a^b", "'^'"},
      {"(^a)", "'^'"},
      {"a$b", "'$'"},
      {"(a$)", "'$'"},
      {"a{65}", "above 64"},
      {"a{2,100}", "above 64"},
      {"a{3,2}", "n > m"},
      {"a**", "following a quantifier"},
      {"*a", "nothing to repeat"},
      {"a|?", "nothing to repeat"},
      {"[abc", "unterminated class"},
      {"(ab", "unterminated group"},
      {"ab)", "unmatched ')'"},
      {"\\p{L}", "property"},
      {"a{", "quantifier"},
      {"[z-a]", "out of order"},
      {"\\q", "unknown escape"},
      {"\\uD800", "surrogate"},
      {"[\\d-z]", "range bound"},
      {"\\x4", "hex"},
      {"a.{16}", "automaton states"},
      {"((a{64}){64}){64}", "too large"},
      {"\xff", "UTF-8"},
  };
  for (const auto& [p, what] : kCases) {
    try {
      ByteRegex::compile(p);
      ADD_FAILURE() << p << " was accepted";
    } catch (const InvalidRequest& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(what), std::string::npos) << p << ": " << msg;
      EXPECT_NE(msg.find(p), std::string::npos) << p << ": " << msg;
    }
  }
}

}  // namespace
}  // namespace tf
