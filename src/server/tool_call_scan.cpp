#include "server/tool_call_scan.h"

#include <algorithm>
#include <cmath>

#include "server/json_fields.h"

namespace tf::server {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

std::string strip(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && is_space(s[a])) ++a;
  while (b > a && is_space(s[b - 1])) --b;
  return s.substr(a, b - a);
}

namespace {

using OJson = nlohmann::ordered_json;
constexpr size_t npos = std::string::npos;

// A match so far: complete, possible once more text comes, or impossible.
enum class M { Ok, More, No };

#define TF_TRY(expr)                  \
  do {                                \
    if (M m_ = (expr); m_ != M::Ok) { \
      return m_;                      \
    }                                 \
  } while (0)

struct Cursor {
  const std::string& s;
  size_t pos = 0;

  bool at_end() const { return pos >= s.size(); }
  void ws() {
    while (pos < s.size() && is_space(s[pos])) ++pos;
  }
  M lit(const std::string& l) {
    size_t n = std::min(l.size(), s.size() - pos);
    if (s.compare(pos, n, l, 0, n) != 0) return M::No;
    if (n < l.size()) return M::More;
    pos += l.size();
    return M::Ok;
  }
  // A JSON string literal, decoded.
  M str(std::string& out) {
    if (at_end()) return M::More;
    if (s[pos] != '"') return M::No;
    for (size_t i = pos + 1; i < s.size(); ++i) {
      if (s[i] == '\\') {
        ++i;
      } else if (s[i] == '"') {
        auto j = nlohmann::json::parse(s.substr(pos, i + 1 - pos), nullptr, false);
        if (!j.is_string()) return M::No;
        out = j.get<std::string>();
        pos = i + 1;
        return M::Ok;
      }
    }
    return M::More;
  }
};

// The end (exclusive) of the JSON object or array that starts at `pos`; npos while it is incomplete.
size_t value_end(const std::string& s, size_t pos) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return npos;
}

// {"name": NAME, "arguments"|"parameters": — leaves the cursor on the arguments object. Other key
// orders and string-encoded arguments are left to the caller's whole-call fallback.
M wrapper_header(Cursor& c, std::string& name) {
  c.ws();
  TF_TRY(c.lit("{"));
  c.ws();
  TF_TRY(c.lit("\"name\""));
  c.ws();
  TF_TRY(c.lit(":"));
  c.ws();
  TF_TRY(c.str(name));
  c.ws();
  TF_TRY(c.lit(","));
  c.ws();
  M key = c.lit("\"arguments\"");
  if (key == M::No) key = c.lit("\"parameters\"");
  TF_TRY(key);
  c.ws();
  TF_TRY(c.lit(":"));
  c.ws();
  if (c.at_end()) return M::More;
  return c.s[c.pos] == '{' ? M::Ok : M::No;
}

// The arguments object at the cursor: appends the call's view; Ok with the cursor after the object.
M args_object(Cursor& c, const std::string& name, ScanResult& r) {
  if (c.at_end()) return M::More;
  if (c.s[c.pos] != '{') return M::No;
  size_t end = value_end(c.s, c.pos);
  r.calls.push_back({name, c.s.substr(c.pos, end == npos ? npos : end - c.pos), end != npos});
  if (end == npos) return M::More;
  c.pos = end;
  return M::Ok;
}

// One {"name", "arguments"} object; Ok with the cursor after it.
M json_call(Cursor& c, ScanResult& r) {
  c.ws();
  size_t start = c.pos;
  std::string name;
  TF_TRY(wrapper_header(c, name));
  TF_TRY(args_object(c, name, r));
  size_t end = value_end(c.s, start);  // the wrapper's own "}" (and any keys after the arguments)
  if (end == npos) return M::More;
  c.pos = end;
  return M::Ok;
}

const OJson* property_schema(const ToolSchemas& schemas, const std::string& tool, const std::string& key) {
  if (!schemas.is_object() || !schemas.contains(tool)) return nullptr;
  const auto& s = schemas[tool];
  if (!s.is_object() || !s.contains("properties") || !s["properties"].is_object()) return nullptr;
  const auto& p = s["properties"];
  return p.contains(key) && p[key].is_object() ? &p[key] : nullptr;
}

void add_param(CallView& v, size_t& n, const std::string& key, const OJson& value) {
  if (n++ > 0) v.args += ",";
  v.args += nlohmann::json(key).dump() + ":" + value.dump();
}

// <function=NAME> then <parameter=KEY>VALUE</parameter>... and </function>.
M qwen_xml(Cursor& c, ScanResult& r, bool ended, const ToolSchemas& schemas) {
  TF_TRY(c.lit("<function="));
  size_t gt = c.s.find('>', c.pos);
  if (gt == npos) return M::More;
  CallView v{strip(c.s.substr(c.pos, gt - c.pos)), "{", false};
  if (v.name.empty() || v.name.find_first_of("<\n") != npos) return M::No;
  c.pos = gt + 1;
  size_t n = 0;
  for (;;) {
    c.ws();
    M p = c.lit("<parameter=");
    if (p == M::Ok) {
      size_t kend = c.s.find('>', c.pos);
      size_t vend = kend == npos ? npos : c.s.find("</parameter>", kend);
      if (vend == npos) break;  // still arriving
      std::string key = strip(c.s.substr(c.pos, kend - c.pos));
      std::string raw = c.s.substr(kend + 1, vend - kend - 1);
      add_param(v, n, key, tag_value(raw, property_schema(schemas, v.name, key), true));
      c.pos = vend + 12;
      continue;
    }
    if (p == M::No && c.lit("</function>") == M::Ok) v.complete = true;
    break;
  }
  if (v.complete || ended) v.args += "}";
  r.calls.push_back(std::move(v));
  return r.calls.back().complete ? M::Ok : M::More;
}

// NAME then <arg_key>KEY</arg_key><arg_value>VALUE</arg_value>... to the closing tag.
M glm_tags(Cursor& c, ScanResult& r, bool ended, const ToolSchemas& schemas) {
  size_t name_end = std::min(c.s.find("<arg_key>", c.pos), c.s.find('\n', c.pos));
  if (name_end == npos) {
    if (!ended) return M::More;
    name_end = c.s.size();
  }
  CallView v{strip(c.s.substr(c.pos, name_end - c.pos)), "{", false};
  if (v.name.empty() || v.name.find_first_of("{}<>\"' ") != npos) return M::No;
  c.pos = name_end;
  size_t n = 0;
  for (;;) {
    c.ws();
    if (c.lit("<arg_key>") != M::Ok) break;
    size_t kend = c.s.find("</arg_key>", c.pos);
    if (kend == npos) break;
    std::string key = strip(c.s.substr(c.pos, kend - c.pos));
    c.pos = kend + 10;
    c.ws();
    if (c.lit("<arg_value>") != M::Ok) break;
    size_t vend = c.s.find("</arg_value>", c.pos);
    if (vend == npos) break;
    add_param(v, n, key,
              tag_value(c.s.substr(c.pos, vend - c.pos), property_schema(schemas, v.name, key), false));
    c.pos = vend + 12;
  }
  v.complete = ended;
  if (ended) v.args += "}";
  r.calls.push_back(std::move(v));
  return ended ? M::Ok : M::More;
}

ScanResult finish(ScanResult r, M m, bool ended) {
  r.malformed = m == M::No || (ended && m == M::More && r.calls.empty());
  return r;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  return s;
}

// The schema's type name ("string", "integer", ...); the first non-null one of a type list.
std::string schema_type(const OJson* prop) {
  if (!prop || !prop->contains("type")) return prop ? "string" : "";
  const auto& t = (*prop)["type"];
  if (t.is_string()) return lower(t.get<std::string>());
  if (t.is_array()) {
    for (const auto& x : t) {
      if (x.is_string() && x != "null") return lower(x.get<std::string>());
    }
  }
  return "string";
}

bool starts(const std::string& s, const char* p) {
  return s.rfind(p, 0) == 0;
}

}  // namespace

OJson tag_value(const std::string& raw, const OJson* prop, bool qwen) {
  std::string v = raw;
  if (qwen) {
    if (!v.empty() && v.front() == '\n') v.erase(0, 1);
    if (!v.empty() && v.back() == '\n') v.pop_back();
  } else {
    v = strip(v);
  }
  std::string type = schema_type(prop);
  OJson parsed = parse_json_bounded<OJson>(v);
  if (qwen && lower(v) == "null") return nullptr;
  if (type.empty()) return qwen || parsed.is_discarded() ? OJson(v) : parsed;  // no schema for it
  if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" ||
      type == "enum") {
    return v;
  }
  if (!qwen) return parsed.is_discarded() ? OJson(v) : parsed;
  if (starts(type, "int") || starts(type, "uint") || starts(type, "long") || starts(type, "short") ||
      starts(type, "unsigned")) {
    return parsed.is_number_integer() ? parsed : OJson(v);
  }
  if (starts(type, "num") || starts(type, "float")) {
    if (!parsed.is_number()) return v;
    double d = parsed.get<double>();
    return d == std::floor(d) && std::fabs(d) < 9e15 ? OJson(int64_t(d)) : OJson(d);
  }
  if (type == "boolean" || type == "bool" || type == "binary") return lower(v) == "true";
  return parsed.is_discarded() ? OJson(v) : parsed;  // object, array and other types
}

ScanResult scan_tagged_body(const std::string& body, bool ended, const ToolSchemas& schemas) {
  Cursor c{body};
  c.ws();
  ScanResult r;
  if (c.at_end()) return finish(r, M::More, ended);
  M m;
  if (body[c.pos] == '{') {
    m = json_call(c, r);
    c.ws();
    if (m == M::Ok && !c.at_end()) m = M::No;
  } else if (body[c.pos] == '<') {
    m = qwen_xml(c, r, ended, schemas);
  } else {
    m = glm_tags(c, r, ended, schemas);
  }
  return finish(std::move(r), m, ended);
}

ScanResult scan_llama3(const std::string& region, bool ended) {
  Cursor c{region};
  ScanResult r;
  c.ws();
  M m = c.lit(kPythonTag);
  if (m == M::More) return finish(r, m, ended);
  for (;;) {
    m = json_call(c, r);
    if (m != M::Ok) break;
    c.ws();
    if (c.at_end()) break;
    m = c.lit(";");
    if (m != M::Ok) break;
  }
  return finish(std::move(r), m, ended);
}

ScanResult scan_mistral(const std::string& region, bool ended) {
  Cursor c{region};
  ScanResult r;
  c.ws();
  M m = c.lit(kMistral);
  while (m == M::Ok) {
    c.ws();
    if (c.at_end()) {
      m = M::More;
    } else if (region[c.pos] == '[') {  // [{"name", "arguments"}, ...]
      ++c.pos;
      while ((m = json_call(c, r)) == M::Ok) {
        c.ws();
        if (c.lit(",") == M::Ok) continue;
        m = c.lit("]");
        break;
      }
    } else {  // NAME[ARGS]{...}
      size_t args = region.find("[ARGS]", c.pos);
      if (args == npos) return finish(std::move(r), M::More, ended);
      std::string name = strip(region.substr(c.pos, args - c.pos));
      if (name.empty() || name.find_first_of("{}[]\"") != npos) return finish(std::move(r), M::No, ended);
      c.pos = args + 6;
      c.ws();
      m = args_object(c, name, r);
    }
    if (m != M::Ok) break;
    c.ws();
    if (c.at_end()) break;
    m = c.lit(kMistral);  // another call (v11+ repeats the marker)
  }
  return finish(std::move(r), m, ended);
}

ScanResult scan_deepseek(const std::string& region, bool ended) {
  Cursor c{region};
  ScanResult r;
  M m = c.lit(kDsCallsBegin);
  while (m == M::Ok) {
    c.ws();
    m = c.lit(kDsCallBegin);
    if (m == M::No) {
      m = c.lit(kDsCallsEnd);
      if (m == M::Ok) break;
      if (c.at_end()) m = M::More;
      break;
    }
    if (m != M::Ok) break;
    size_t sep = region.find(kDsSep, c.pos);
    if (sep == npos) return finish(std::move(r), M::More, ended);
    std::string name = strip(region.substr(c.pos, sep - c.pos));
    c.pos = sep + kDsSep.size();
    if (name == "function") {  // V3/R1: NAME\n```json\n{...}\n```
      size_t nl = region.find('\n', c.pos);
      if (nl == npos) return finish(std::move(r), M::More, ended);
      name = strip(region.substr(c.pos, nl - c.pos));
      c.pos = nl + 1;
      c.ws();
      if ((m = c.lit("```json")) != M::Ok) break;
    }
    c.ws();
    if ((m = args_object(c, name, r)) != M::Ok) break;
    size_t end = region.find(kDsCallEnd, c.pos);
    if (end == npos) return finish(std::move(r), M::More, ended);
    c.pos = end + kDsCallEnd.size();
  }
  return finish(std::move(r), m, ended);
}

}  // namespace tf::server
