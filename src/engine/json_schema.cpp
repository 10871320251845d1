// JsonSchema: compiling the supported subset of JSON Schema (json_matcher.h) into nodes the matcher walks.
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/byte_regex.h"
#include "engine/json_matcher.h"
#include "engine/json_schema_detail.h"

namespace tf {

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

std::shared_ptr<const JsonSchema> JsonSchema::text_regex(std::string_view pattern) {
  auto s = std::make_shared<JsonSchema>();
  s->text_ = std::make_shared<const ByteRegex>(ByteRegex::compile(pattern, ByteRegex::Mode::kFullMatch));
  if (s->text_->start() == ByteRegex::kDead)
    throw InvalidRequest("the regex '" + std::string(pattern) + "' matches nothing");
  return s;
}

std::shared_ptr<const JsonSchema> JsonSchema::text_choice(const std::vector<std::string>& choices) {
  if (choices.empty()) throw InvalidRequest("the list of choices is empty");
  std::string pattern;
  for (const std::string& c : choices) {
    if (!pattern.empty()) pattern += '|';
    pattern += "(?:";
    for (char ch : c) {  // ASCII punctuation escaped; other bytes (UTF-8 included) are literal
      if (std::string_view("\\^$.|?*+()[]{}/-").find(ch) != std::string_view::npos) pattern += '\\';
      if (ch == '\n') {
        pattern += "\\n";
        continue;
      }
      pattern += ch;
    }
    pattern += ')';
  }
  return text_regex(pattern);
}

std::shared_ptr<const JsonSchema> JsonSchema::after_reasoning(const std::shared_ptr<const JsonSchema>& base,
                                                              ReasoningGate gate) {
  if (gate.open.empty() || gate.close.empty()) throw InvalidRequest("a reasoning gate needs both markers");
  auto s = std::make_shared<JsonSchema>(*base);
  s->gate_ = {std::move(gate)};
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

}  // namespace tf
