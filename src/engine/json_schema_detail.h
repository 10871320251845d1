#pragma once
// The compiled form of a JSON Schema (JsonSchema's nodes), shared by the compiler (json_schema.cpp) and the
// matcher (json_matcher.cpp). Internal to those two files.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/byte_regex.h"
#include "engine/json_matcher.h"

namespace tf {

namespace json_schema_detail {

enum NodeKind : uint8_t { kTyped, kAnyOf, kLiteral };
enum TypeBit : uint8_t {
  kString = 1,
  kNumber = 2,
  kInteger = 4,
  kBoolean = 8,
  kNull = 16,
  kObject = 32,
  kArray = 64,
  kAllTypes = 127
};
constexpr int kNone = -1;  // no schema: no extra keys / no (further) items

struct Property {
  std::string key;  // the name's compact JSON serialization without the quotes
  int node = 0;
  bool required = false;
};

// A string's pattern and, when the string has length bounds too, the lengths (in code points) of the
// completions from each DFA state to a match, so that the two constraints are enforced together exactly.
struct StringPattern {
  ByteRegex re;
  uint32_t min_length = 0, max_length = UINT32_MAX;
  uint32_t horizon = 0;  // completion lengths 0..horizon are exact; bit horizon + 1: some longer one
  size_t words = 0;      // per state; 0 without length bounds
  std::vector<uint64_t> lengths;

  // Some completion from the live DFA state `st` matches with a total length within the bounds, `count`
  // code points being there already (one in progress included).
  bool fits(int st, uint32_t count) const {
    if (words == 0) return true;
    uint32_t lo = std::min(min_length > count ? min_length - count : 0, horizon + 1);
    uint32_t hi = max_length == UINT32_MAX ? horizon + 1 : std::min(max_length - count, horizon + 1);
    const uint64_t* w = &lengths[static_cast<size_t>(st) * words];
    for (uint32_t k = lo; k <= hi; k = (k | 63) + 1) {
      uint64_t bits = w[k / 64] >> (k % 64);
      if (hi - k < 63) bits &= (uint64_t{2} << (hi - k)) - 1;
      if (bits) return true;
    }
    return false;
  }
};

struct Node {
  NodeKind kind = kTyped;
  uint8_t types = kAllTypes;
  uint32_t min_length = 0, max_length = UINT32_MAX;
  // Strings: a DFA over the decoded content; a string frame's aux2 is its state.
  std::shared_ptr<const StringPattern> pattern;
  std::vector<Property> props;
  std::vector<uint32_t> first_required_from{0};  // [i]: first required property index >= i, else size
  int additional = kNone;
  uint64_t usable = ~uint64_t{0};  // properties whose schema some finite value satisfies
  std::vector<int> prefix_items;
  int items = 0;
  uint32_t min_items = 0, max_items = UINT32_MAX;
  std::vector<int> alternatives;
  std::vector<std::string> literals;  // at most 64, matched as one candidate set
};

// Built-in nodes present in every compiled schema.
constexpr int kAnyNode = 0, kAnyObjectNode = 1, kTrueNode = 2, kFalseNode = 3, kNullNode = 4;

inline bool is_json_whitespace(uint8_t c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

}  // namespace json_schema_detail

}  // namespace tf
