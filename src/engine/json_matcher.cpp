#include "engine/json_matcher.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/byte_regex.h"

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

}  // namespace json_schema_detail

using namespace json_schema_detail;
using ojson = nlohmann::ordered_json;

JsonSchema::JsonSchema() = default;
JsonSchema::~JsonSchema() = default;
const Node& JsonSchema::node(int i) const {
  return nodes_[static_cast<size_t>(i)];
}

// ---------------------------------------------------------------------------------------------------
// Compilation

namespace {

const char* const kAnnotations[] = {"title", "description", "default",    "examples", "$schema",
                                    "$id",   "$comment",    "deprecated", "readOnly", "writeOnly",
                                    "$defs", "definitions", "format",     "nullable", "discriminator"};
const char* const kCombinators[] = {"enum", "const", "anyOf", "oneOf", "allOf", "$ref"};
const char* const kStructural[] = {"type",      "properties",  "required", "additionalProperties",
                                   "items",     "prefixItems", "minItems", "maxItems",
                                   "minLength", "maxLength",   "pattern"};
const char* const kRefused[] = {"minimum",
                                "maximum",
                                "exclusiveMinimum",
                                "exclusiveMaximum",
                                "multipleOf",
                                "patternProperties",
                                "propertyNames",
                                "if",
                                "then",
                                "else",
                                "not",
                                "dependentRequired",
                                "dependentSchemas",
                                "dependencies",
                                "unevaluatedProperties",
                                "unevaluatedItems",
                                "contains",
                                "minContains",
                                "maxContains",
                                "uniqueItems",
                                "minProperties",
                                "maxProperties",
                                "additionalItems",
                                "contentEncoding",
                                "contentMediaType",
                                "contentSchema",
                                "$anchor",
                                "$dynamicRef",
                                "$dynamicAnchor",
                                "$recursiveRef",
                                "$recursiveAnchor",
                                "$vocabulary"};

template <size_t N>
bool one_of(const std::string& k, const char* const (&list)[N]) {
  return std::any_of(std::begin(list), std::end(list), [&](const char* s) { return k == s; });
}

std::string pointer_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string pointer_unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '~' && i + 1 < s.size() && (s[i + 1] == '0' || s[i + 1] == '1')) {
      out += s[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool is_json_whitespace(uint8_t c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw InvalidRequest("json_schema: " + why + " at " + path);
}

}  // namespace

class JsonSchemaCompiler {
 public:
  explicit JsonSchemaCompiler(const ojson& root) : root_(root) {}

  std::shared_ptr<JsonSchema> run(bool any_object = false) {
    auto schema = std::make_shared<JsonSchema>();
    s_ = schema.get();
    add_builtins();
    s_->root_ = any_object ? kAnyObjectNode : ref("#", "#");
    prune_unsatisfiable();
    return schema;
  }

 private:
  int add(Node n) {
    s_->nodes_.push_back(std::move(n));
    return static_cast<int>(s_->nodes_.size()) - 1;
  }

  void add_builtins() {
    Node any;
    any.additional = kAnyNode;
    add(any);
    Node object;
    object.types = kObject;
    object.additional = kAnyNode;
    add(object);
    for (const char* lit : {"true", "false", "null"}) {
      Node n;
      n.kind = kLiteral;
      n.literals = {lit};
      add(n);
    }
  }

  int any_of(std::vector<int> alts) {
    if (alts.size() == 1) return alts[0];
    Node n;
    n.kind = kAnyOf;
    n.alternatives = std::move(alts);
    return add(std::move(n));
  }

  // Local references only; the target is compiled once, so recursive schemas become cycles of nodes.
  int ref(const std::string& target, const std::string& path) {
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const ojson* json = &root_;
    if (target != "#") {
      std::string name;
      const char* section = nullptr;
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        std::string p(prefix);
        if (target.compare(0, p.size(), p) == 0) {
          name = target.substr(p.size());
          section = prefix[2] == '$' ? "$defs" : "definitions";
        }
      }
      if (!section || name.empty() || name.find('/') != std::string::npos)
        refuse(path, "$ref \"" + target +
                         "\" is not supported (only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\")");
      name = pointer_unescape(name);
      if (!root_.is_object() || !root_.contains(section) || !root_[section].is_object() ||
          !root_[section].contains(name))
        refuse(path, "$ref \"" + target + "\" does not resolve");
      json = &root_[section][name];
    }
    Node placeholder;
    placeholder.kind = kAnyOf;
    int idx = add(placeholder);
    refs_[target] = idx;
    int real = build(*json, target);
    s_->nodes_[static_cast<size_t>(idx)].alternatives = {real};
    return idx;
  }

  // Which nodes some finite document satisfies (a least fixpoint: recursion must bottom out), then cut
  // every path into the others, so that every prefix the matcher accepts can still be completed.
  void prune_unsatisfiable() {
    auto& nodes = s_->nodes_;
    std::vector<char> sat(nodes.size(), 0);
    auto item = [](const Node& n, size_t i) {
      return i < n.prefix_items.size() ? n.prefix_items[i] : n.items;
    };
    auto object_ok = [&](const Node& n) {
      return std::all_of(n.props.begin(), n.props.end(),
                         [&](const Property& p) { return !p.required || sat[size_t(p.node)]; });
    };
    auto array_ok = [&](const Node& n) {  // items past the prefix share one schema: check one of them
      for (size_t i = 0; i < std::min<size_t>(n.min_items, n.prefix_items.size() + 1); ++i)
        if (item(n, i) == kNone || !sat[size_t(item(n, i))]) return false;
      return true;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (sat[i]) continue;
        const Node& n = nodes[i];
        bool ok = n.kind == kLiteral ||
                  (n.kind == kAnyOf && std::any_of(n.alternatives.begin(), n.alternatives.end(),
                                                   [&](int a) { return sat[size_t(a)]; })) ||
                  (n.kind == kTyped &&
                   ((n.types & (kString | kNumber | kInteger | kBoolean | kNull)) ||
                    ((n.types & kObject) && object_ok(n)) || ((n.types & kArray) && array_ok(n))));
        if (ok) sat[i] = 1, changed = true;
      }
    }
    if (!sat[size_t(s_->root_)])
      refuse("#", "the schema admits no JSON value (a cycle of references with no way out?)");
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node& n = nodes[i];
      std::erase_if(n.alternatives, [&](int a) { return !sat[size_t(a)]; });
      if (n.kind != kTyped) continue;
      if (!object_ok(n)) n.types &= ~kObject;
      if (!array_ok(n)) n.types &= ~kArray;
      for (size_t p = 0; p < n.props.size(); ++p)
        if (!sat[size_t(n.props[p].node)]) n.usable &= ~(uint64_t{1} << p);
      if (n.additional != kNone && !sat[size_t(n.additional)]) n.additional = kNone;
      for (size_t k = n.min_items; k < n.max_items && k <= n.prefix_items.size(); ++k)
        if (item(n, k) == kNone || !sat[size_t(item(n, k))]) n.max_items = static_cast<uint32_t>(k);
    }
    flatten_alternatives();
  }

  // anyOf of anyOf (and $ref chains) become one list of non-anyOf nodes, so the matcher forks once per
  // value without recursion, whatever the schema's shape.
  void flatten_alternatives() {
    auto& nodes = s_->nodes_;
    std::vector<std::vector<int>> leaves(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].kind != kAnyOf) continue;
      std::vector<char> seen(nodes.size(), 0);
      std::vector<int> todo = {static_cast<int>(i)};
      while (!todo.empty()) {
        int k = todo.back();
        todo.pop_back();
        if (seen[size_t(k)]) continue;
        seen[size_t(k)] = 1;
        if (nodes[size_t(k)].kind != kAnyOf) {
          leaves[i].push_back(k);
          continue;
        }
        const auto& alts = nodes[size_t(k)].alternatives;
        todo.insert(todo.end(), alts.rbegin(), alts.rend());  // keep the schema's order
      }
      if (leaves[i].size() > kMaxAlternatives)
        refuse("#", "more than " + std::to_string(kMaxAlternatives) +
                        " alternatives (anyOf/oneOf/enum) for one value");
    }
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].kind == kAnyOf) nodes[i].alternatives = std::move(leaves[i]);
  }

  static constexpr size_t kMaxAlternatives = 256;

  static uint32_t count_arg(const ojson& v, const std::string& path, const char* key) {
    double d = v.is_number() ? v.get<double>() : -1;
    if (!(d >= 0) || d != std::floor(d))
      refuse(path + "/" + key, std::string("\"") + key + "\" must be a non-negative integer");
    return d >= static_cast<double>(UINT32_MAX) ? UINT32_MAX : static_cast<uint32_t>(d);
  }

  static uint8_t type_bit(const ojson& t, const std::string& path) {
    static const std::pair<const char*, uint8_t> kTypes[] = {
        {"string", kString}, {"number", kNumber}, {"integer", kInteger}, {"boolean", kBoolean},
        {"null", kNull},     {"object", kObject}, {"array", kArray}};
    if (t.is_string())
      for (auto& [name, bit] : kTypes)
        if (t.get<std::string>() == name) return bit;
    refuse(path + "/type", "unknown type " + t.dump());
  }

  static bool value_has_type(const ojson& v, uint8_t types) {
    if (v.is_string()) return types & kString;
    if (v.is_boolean()) return types & kBoolean;
    if (v.is_null()) return types & kNull;
    if (v.is_object()) return types & kObject;
    if (v.is_array()) return types & kArray;
    if (v.is_number_integer()) return types & (kNumber | kInteger);
    double d = v.get<double>();
    return (types & kNumber) || ((types & kInteger) && std::isfinite(d) && d == std::floor(d));
  }

  // A constant: scalars are literal bytes, objects/arrays become structural nodes (whitespace allowed).
  int const_node(const ojson& v) {
    Node n;
    if (v.is_object()) {
      n.types = kObject;
      for (auto& [k, sub] : v.items()) {
        std::string key = ojson(k).dump();
        n.props.push_back({key.substr(1, key.size() - 2), const_node(sub), true});
      }
      if (n.props.size() > 64) refuse("#", "a constant object with more than 64 properties is not supported");
      n.first_required_from.clear();
      for (size_t i = 0; i <= n.props.size(); ++i)
        n.first_required_from.push_back(static_cast<uint32_t>(std::min(i, n.props.size())));
    } else if (v.is_array()) {
      n.types = kArray;
      for (auto& sub : v) n.prefix_items.push_back(const_node(sub));
      n.items = kNone;
      n.min_items = n.max_items = static_cast<uint32_t>(v.size());
    } else {
      n.kind = kLiteral;
      n.literals = {v.dump()};
    }
    return add(std::move(n));
  }

  int enum_node(const ojson& values, uint8_t types, const std::string& path) {
    std::vector<int> alts;
    Node lits;
    lits.kind = kLiteral;
    auto flush = [&] {
      if (!lits.literals.empty()) alts.push_back(add(lits));
      lits.literals.clear();
    };
    for (const auto& v : values) {
      if (!value_has_type(v, types)) continue;
      if (v.is_object() || v.is_array()) {
        alts.push_back(const_node(v));
        continue;
      }
      std::string lit = v.dump();
      if (std::find(lits.literals.begin(), lits.literals.end(), lit) != lits.literals.end()) continue;
      lits.literals.push_back(lit);
      if (lits.literals.size() == 64) flush();
    }
    flush();
    if (alts.empty()) refuse(path, "no value of \"enum\"/\"const\" matches the schema's type");
    return any_of(std::move(alts));
  }

  int build(const ojson& s, const std::string& path) {
    if (depth_ > kMaxSchemaDepth) refuse(path, "the schema is nested too deeply");
    struct Nest {
      int& depth;
      explicit Nest(int& d) : depth(++d) {}
      ~Nest() { --depth; }
    } nest(depth_);
    if (s.is_boolean()) {
      if (s.get<bool>()) return kAnyNode;
      refuse(path, "the schema false (no value allowed) is not supported");
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean, got " + s.dump());
    std::vector<std::string> combinators, structural;
    for (auto& [k, v] : s.items()) {
      if (one_of(k, kAnnotations)) continue;
      if (one_of(k, kCombinators))
        combinators.push_back(k);
      else if (one_of(k, kStructural))
        structural.push_back(k);
      else if (one_of(k, kRefused))
        refuse(path, "keyword \"" + k + "\" is not supported by structured outputs");
      else
        refuse(path, "unknown keyword \"" + k + "\"");
    }
    bool nullable = false;
    if (s.contains("nullable")) {
      if (!s["nullable"].is_boolean()) refuse(path + "/nullable", "\"nullable\" must be a boolean");
      nullable = s["nullable"].get<bool>();
    }
    if (combinators.size() > 1)
      refuse(path, "combining \"" + combinators[0] + "\" and \"" + combinators[1] + "\" is not supported");
    if (combinators.empty()) return typed(s, path, nullable);
    const std::string& c = combinators[0];
    bool is_enum = c == "enum" || c == "const";
    for (const auto& k : structural)
      if (!(is_enum && k == "type"))
        refuse(path, "combining \"" + c + "\" and \"" + k + "\" is not supported");
    int idx;
    if (is_enum) {
      uint8_t types = s.contains("type") ? parse_types(s["type"], path) : uint8_t{kAllTypes};
      if (nullable) types |= kNull;
      if (c == "enum" && (!s["enum"].is_array() || s["enum"].empty()))
        refuse(path + "/enum", "\"enum\" must be a non-empty array");
      idx = enum_node(c == "enum" ? s["enum"] : ojson::array({s["const"]}), types, path + "/" + c);
      nullable = false;  // already folded into the type filter
    } else if (c == "$ref") {
      if (!s["$ref"].is_string()) refuse(path + "/$ref", "\"$ref\" must be a string");
      idx = ref(s["$ref"].get<std::string>(), path + "/$ref");
    } else {
      const ojson& list = s[c];
      if (!list.is_array() || list.empty()) refuse(path + "/" + c, "\"" + c + "\" must be a non-empty array");
      if (c == "allOf" && list.size() != 1)
        refuse(path + "/allOf", "\"allOf\" with more than one subschema is not supported");
      std::vector<int> alts;
      for (size_t i = 0; i < list.size(); ++i)
        alts.push_back(build(list[i], path + "/" + c + "/" + std::to_string(i)));
      idx = any_of(std::move(alts));
    }
    return nullable ? any_of({idx, kNullNode}) : idx;
  }

  uint8_t parse_types(const ojson& t, const std::string& path) {
    if (!t.is_array()) return type_bit(t, path);
    if (t.empty()) refuse(path + "/type", "\"type\" must not be an empty array");
    uint8_t types = 0;
    for (const auto& x : t) types |= type_bit(x, path);
    return types;
  }

  static bool has_any(const ojson& s, std::initializer_list<const char*> keys) {
    return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
  }

  int typed(const ojson& s, const std::string& path, bool nullable) {
    Node n;
    if (s.contains("type")) {
      n.types = parse_types(s["type"], path);
    } else {
      // Stricter than JSON Schema (where such keywords don't restrict the type): the intent is clear.
      uint8_t inferred = 0;
      if (has_any(s, {"properties", "required", "additionalProperties"})) inferred |= kObject;
      if (has_any(s, {"items", "prefixItems", "minItems", "maxItems"})) inferred |= kArray;
      if (has_any(s, {"minLength", "maxLength", "pattern"})) inferred |= kString;
      n.types = inferred ? inferred : uint8_t{kAllTypes};
    }
    if (nullable) n.types |= kNull;
    if (s.contains("minLength")) n.min_length = count_arg(s["minLength"], path, "minLength");
    if (s.contains("maxLength")) n.max_length = count_arg(s["maxLength"], path, "maxLength");
    if (n.min_length > n.max_length) refuse(path, "\"minLength\" is greater than \"maxLength\"");
    if (s.contains("pattern")) build_pattern(s, path, n);
    build_array(s, path, n);
    build_object(s, path, n);
    return add(std::move(n));
  }

  // The pattern's DFA runs over the string's decoded content; a pattern no string (within the length
  // bounds) matches leaves the node without the string type.
  static void build_pattern(const ojson& s, const std::string& path, Node& n) {
    if (!s["pattern"].is_string()) refuse(path + "/pattern", "\"pattern\" must be a string");
    auto p = std::make_shared<StringPattern>();
    try {
      p->re = ByteRegex::compile(s["pattern"].get<std::string>());
    } catch (const InvalidRequest& e) {
      refuse(path + "/pattern", e.what());
    }
    p->min_length = n.min_length, p->max_length = n.max_length;
    if (p->re.start() != ByteRegex::kDead && (n.min_length > 0 || n.max_length != UINT32_MAX))
      completion_lengths(*p, path);
    if (p->re.start() == ByteRegex::kDead || !p->fits(p->re.start(), 0)) n.types &= ~kString;
    n.pattern = std::move(p);
  }

  static constexpr uint32_t kMaxHorizon = 4096;
  // (state, length) pairs searched, at most: bounds the time and the queue (32 MB).
  static constexpr uint64_t kMaxLengthWork = 4'000'000;

  // Which completion lengths (code points: bytes that are not UTF-8 continuations) lead from each DFA
  // state to a match: a backward search over (state, length) pairs, lengths past the horizon merged.
  // With one bound the horizon can stop at the number of states: a shortest completion visits each state
  // at most once, and a completion longer than that goes round a cycle, so arbitrarily long ones exist.
  static void completion_lengths(StringPattern& p, const std::string& path) {
    const ByteRegex& re = p.re;
    const size_t ns = re.num_states();
    const bool both = p.min_length > 0 && p.max_length != UINT32_MAX;
    uint64_t h = p.max_length != UINT32_MAX ? p.max_length : p.min_length;
    if (!both) h = std::min<uint64_t>(h, ns + 1);
    if (h > kMaxHorizon)
      refuse(path, "\"pattern\" with both \"minLength\" and \"maxLength\" above " +
                       std::to_string(kMaxHorizon) + " is not supported");
    std::vector<std::vector<std::pair<int, uint8_t>>> rev(ns);  // (predecessor, code points: 0 or 1)
    size_t edges = 0;
    std::vector<std::pair<int, uint8_t>> out;
    for (size_t st = 0; st < ns; ++st) {
      out.clear();
      for (int b = 0; b < 256; ++b) {
        int t = re.step(static_cast<int>(st), static_cast<uint8_t>(b));
        if (t != ByteRegex::kDead) out.push_back({t, static_cast<uint8_t>((b & 0xC0) != 0x80)});
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      for (auto [t, w] : out) rev[static_cast<size_t>(t)].push_back({static_cast<int>(st), w});
      edges += out.size();
    }
    if (edges * (h + 2) > kMaxLengthWork)
      refuse(path, "\"pattern\" with \"minLength\"/\"maxLength\" " + std::to_string(h) +
                       " is too large to enforce exactly (simplify the pattern or the bounds)");
    p.horizon = static_cast<uint32_t>(h);
    p.words = (h + 2 + 63) / 64;
    p.lengths.assign(ns * p.words, 0);
    auto mark = [&](int st, uint32_t k) {
      uint64_t& w = p.lengths[static_cast<size_t>(st) * p.words + k / 64];
      if (w >> (k % 64) & 1) return false;
      w |= uint64_t{1} << (k % 64);
      return true;
    };
    std::vector<std::pair<int, uint32_t>> queue;
    for (size_t st = 0; st < ns; ++st)
      if (re.accepting(static_cast<int>(st)) && mark(static_cast<int>(st), 0))
        queue.push_back({static_cast<int>(st), 0});
    for (size_t q = 0; q < queue.size(); ++q) {
      auto [t, k] = queue[q];
      for (auto [st, w] : rev[static_cast<size_t>(t)]) {
        uint32_t k2 = std::min<uint32_t>(k + w, p.horizon + 1);
        if (mark(st, k2)) queue.push_back({st, k2});
      }
    }
  }

  void build_array(const ojson& s, const std::string& path, Node& n) {
    if (s.contains("prefixItems")) {
      const ojson& p = s["prefixItems"];
      if (!p.is_array()) refuse(path + "/prefixItems", "\"prefixItems\" must be an array of schemas");
      for (size_t i = 0; i < p.size(); ++i)
        n.prefix_items.push_back(build(p[i], path + "/prefixItems/" + std::to_string(i)));
    }
    if (s.contains("items")) {
      const ojson& it = s["items"];
      if (it.is_array())
        refuse(path + "/items", "\"items\" as an array is not supported (use \"prefixItems\")");
      n.items = it.is_boolean() && !it.get<bool>() ? kNone : build(it, path + "/items");
    }
    if (s.contains("minItems")) n.min_items = count_arg(s["minItems"], path, "minItems");
    if (s.contains("maxItems")) n.max_items = count_arg(s["maxItems"], path, "maxItems");
    if (n.min_items > n.max_items) refuse(path, "\"minItems\" is greater than \"maxItems\"");
    if (n.items == kNone && n.min_items > n.prefix_items.size())
      refuse(path, "\"minItems\" is larger than the number of items allowed");
  }

  void build_object(const ojson& s, const std::string& path, Node& n) {
    std::vector<std::string> names;
    if (s.contains("properties")) {
      const ojson& props = s["properties"];
      if (!props.is_object()) refuse(path + "/properties", "\"properties\" must be an object");
      if (props.size() > 64)
        refuse(path + "/properties", "more than 64 properties in one object are not supported");
      for (auto& [name, sub] : props.items()) {
        std::string key = ojson(name).dump();
        int node = build(sub, path + "/properties/" + pointer_escape(name));
        n.props.push_back({key.substr(1, key.size() - 2), node, false});
        names.push_back(name);
      }
    }
    if (s.contains("required")) {
      const ojson& req = s["required"];
      if (!req.is_array()) refuse(path + "/required", "\"required\" must be an array of names");
      for (const auto& r : req) {
        auto it = r.is_string() ? std::find(names.begin(), names.end(), r.get<std::string>()) : names.end();
        if (it == names.end())
          refuse(path + "/required", "required property " + r.dump() + " is not listed in \"properties\"");
        n.props[static_cast<size_t>(it - names.begin())].required = true;
      }
    }
    if (s.contains("additionalProperties")) {
      const ojson& a = s["additionalProperties"];
      n.additional = a.is_boolean() && !a.get<bool>() ? kNone : build(a, path + "/additionalProperties");
    } else {
      // OpenAI strict mode: exactly the listed properties. Without "properties", any object.
      n.additional = s.contains("properties") ? kNone : kAnyNode;
    }
    size_t np = n.props.size();
    n.first_required_from.assign(np + 1, static_cast<uint32_t>(np));
    for (size_t i = np; i-- > 0;)
      n.first_required_from[i] =
          n.props[i].required ? static_cast<uint32_t>(i) : n.first_required_from[i + 1];
  }

  const ojson& root_;
  JsonSchema* s_ = nullptr;
  std::map<std::string, int> refs_;
  int depth_ = 0;
  static constexpr int kMaxSchemaDepth = 128;  // schema objects inside one another (compile recursion)
};

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::ordered_json& schema) {
  std::shared_ptr<const JsonSchema> compiled = JsonSchemaCompiler(schema).run();
  // A schema no document can start (e.g. a $ref cycle with nothing else) is the caller's to fix.
  JsonMatcher m(compiled);
  bool starts = false;
  for (int c = 0; c < 256 && !starts; ++c)
    starts = !is_json_whitespace(static_cast<uint8_t>(c)) && JsonMatcher(m).feed(static_cast<uint8_t>(c));
  if (!starts) refuse("#", "the schema admits no JSON value");
  return compiled;
}

std::shared_ptr<const JsonSchema> JsonSchema::compile(const nlohmann::json& schema) {
  return compile(nlohmann::ordered_json::parse(schema.dump()));
}

std::shared_ptr<const JsonSchema> JsonSchema::with_suffix(const std::shared_ptr<const JsonSchema>& base,
                                                          std::string suffix) {
  auto s = std::make_shared<JsonSchema>(*base);
  s->suffix_ = std::move(suffix);
  return s;
}

std::shared_ptr<const JsonSchema> JsonSchema::any_object() {
  static const std::shared_ptr<const JsonSchema> s =
      JsonSchemaCompiler(nlohmann::ordered_json::object()).run(/*any_object=*/true);
  return s;
}

std::shared_ptr<const JsonSchema> JsonSchema::any_value() {
  static const std::shared_ptr<const JsonSchema> s = compile(nlohmann::ordered_json::object());
  return s;
}

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

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonSchema> schema) : schema_(std::move(schema)) {
  frames_.reserve(8);
  frames_.push_back(make_frame(kHeader, 0));
  frames_.push_back(make_frame(kValue, schema_->root()));
  frames_[0].count = 1;
}

bool JsonMatcher::feed(uint8_t byte) {
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
  if (schema_->suffix().empty()) return document_complete();
  return in_suffix() && frames_[0].aux2 == schema_->suffix().size();
}

bool JsonMatcher::dead_end() const {
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

size_t JsonMatcher::num_stacks() const {
  size_t n = 0;
  for (size_t i = 0; i < frames_.size(); i += frames_[i].count + 1) ++n;
  return n;
}

}  // namespace tf
