#include "text/jinja/methods.h"

#include <utf8proc.h>

#include <algorithm>
#include <unordered_set>

#include "text/jinja/operators.h"

namespace tf::jinja {
namespace {

std::string str_arg(const CallArgs& a, size_t idx, const char* name, const char* method) {
  const Value* v = a.arg(idx, name);
  if (!v || !v->is_string())
    throw TemplateError(std::string(method) + "() argument '" + name + "' must be str");
  return v->str();
}

int64_t int_arg(const CallArgs& a, size_t idx, const char* name, int64_t def) {
  const Value* v = a.arg(idx, name);
  if (!v || v->is_none()) return def;
  if (!v->is_int() && !v->is_bool()) throw TemplateError(std::string("'") + name + "' must be an integer");
  return v->as_int();
}

bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

template <typename F>
std::string map_cps(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) utf8_append(out, f(c));
  return out;
}

char32_t to_upper(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_lower(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_title(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

bool all_cps(const std::string& s, bool (*pred)(char32_t)) {
  auto cps = utf8_decode(s);
  if (cps.empty()) return false;
  return std::all_of(cps.begin(), cps.end(), pred);
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto test = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_string()) return test(what.str());
  if (what.is_list() && what.list()->tuple) {
    for (const auto& v : what.list()->items)
      if (v.is_string() && test(v.str())) return true;
    return false;
  }
  throw TemplateError(std::string(start ? "startswith" : "endswith") +
                      " first arg must be str or a tuple of str, not " + what.type_name());
}

int64_t count_sub(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_decode(s).size()) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

// Byte offset to code point index (find() returns code point positions in Python).
int64_t cp_index(const std::string& s, size_t byte_pos) {
  int64_t n = 0;
  for (size_t k = 0; k < byte_pos; ++k) n += (static_cast<unsigned char>(s[k]) & 0xC0) != 0x80;
  return n;
}

std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') ++k;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    size_t end = fmt.find('}', k);
    if (end == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, end - k - 1);
    size_t colon = field.find_first_of(":!");
    std::string key = field.substr(0, colon);
    const Value* v = nullptr;
    if (key.empty()) {
      v = auto_idx < a.pos.size() ? &a.pos[auto_idx++] : nullptr;
    } else if (std::all_of(key.begin(), key.end(), ::isdigit)) {
      size_t i = std::stoul(key);
      v = i < a.pos.size() ? &a.pos[i] : nullptr;
    } else {
      for (const auto& [n, val] : a.kw)
        if (n == key) v = &val;
    }
    if (!v) throw TemplateError("format(): missing argument for field '" + field + "'");
    out += field.size() > colon && colon != std::string::npos && field[colon] == '!' &&
                   field.substr(colon) == "!r"
               ? v->repr()
               : v->to_str();
    k = end;
  }
  return out;
}

Value unsafe(const Value& self, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + self.type_name() +
                          "' object is unsafe.");
}

Value string_method(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = a.arg(0, "chars");
    return Value(py_strip(s, chars ? *chars : Value::none(), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = a.arg(0, "sep");
    int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
    std::vector<std::string> parts;
    if (name == "rsplit" && maxsplit >= 0) {
      // Split from the right: reverse, split with the reversed separator, reverse back.
      auto rev = [](std::string x) {
        auto cps = utf8_decode(x);
        std::reverse(cps.begin(), cps.end());
        return utf8_encode(cps);
      };
      Value rsep = sep && sep->is_string() ? Value(rev(sep->str())) : Value::none();
      parts = py_split(rev(s), rsep, maxsplit);
      for (auto& p : parts) p = rev(p);
      std::reverse(parts.begin(), parts.end());
    } else {
      parts = py_split(s, sep ? *sep : Value::none(), maxsplit);
    }
    std::vector<Value> items(parts.begin(), parts.end());
    return make_list(std::move(items));
  }
  if (name == "splitlines") {
    std::vector<Value> items;
    size_t b = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k] == '\n' || s[k] == '\r') {
        items.emplace_back(s.substr(b, k - b));
        if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
        b = k + 1;
      }
    }
    if (b < s.size()) items.emplace_back(s.substr(b));
    return make_list(std::move(items));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.arg(0, "prefix");
    if (!p) throw TemplateError(name + "() takes at least 1 argument");
    return Value(starts_or_ends(s, *p, name == "startswith"));
  }
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower" || name == "casefold") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "swapcase")
    return Value(
        map_cps(s, [](char32_t c) { return is_cased(c) && to_upper(c) == c ? to_lower(c) : to_upper(c); }));
  if (name == "replace")
    return Value(py_replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                            int_arg(a, 2, "count", -1)));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    std::string sub = str_arg(a, 0, "sub", name.c_str());
    size_t p = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name.find("index") != std::string::npos) throw TemplateError("substring not found");
      return Value(int64_t{-1});
    }
    return Value(cp_index(s, p));
  }
  if (name == "count") return Value(count_sub(s, str_arg(a, 0, "sub", "count")));
  if (name == "join") {
    const Value* it = a.arg(0, "iterable");
    if (!it) throw TemplateError("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const auto& v : iterate(*it)) {
      if (!v.is_string())
        throw TemplateError("sequence item: expected str instance, " + v.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += v.str();
    }
    return Value(out);
  }
  if (name == "format") return Value(str_format(s, a));
  if (name == "partition" || name == "rpartition") {
    std::string sep = str_arg(a, 0, "sep", name.c_str());
    if (sep.empty()) throw TemplateError("empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos)
      return name == "partition" ? make_list({Value(s), Value(""), Value("")}, true)
                                 : make_list({Value(""), Value(""), Value(s)}, true);
    return make_list({Value(s.substr(0, p)), Value(sep), Value(s.substr(p + sep.size()))}, true);
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return Value(all_cps(s, [](char32_t c) {
      return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
    }));
  if (name == "isalpha")
    return Value(all_cps(s, [](char32_t c) {
      auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
    }));
  if (name == "isalnum")
    return Value(all_cps(s, [](char32_t c) {
      auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || cat == UTF8PROC_CATEGORY_ND;
    }));
  if (name == "isspace") return Value(all_cps(s, is_py_space));
  if (name == "islower" || name == "isupper") {
    bool any_cased = false, ok = true;
    for (char32_t c : utf8_decode(s)) {
      if (!is_cased(c)) continue;
      any_cased = true;
      ok = ok &&
           (name == "islower" ? to_upper(c) != c || to_lower(c) == c : to_lower(c) != c || to_upper(c) == c);
    }
    return Value(any_cased && ok);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string p = str_arg(a, 0, "prefix", name.c_str());
    bool pre = name == "removeprefix";
    if (starts_or_ends(s, Value(p), pre) && !p.empty())
      return Value(pre ? s.substr(p.size()) : s.substr(0, s.size() - p.size()));
    return Value(s);
  }
  if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
    int64_t width = int_arg(a, 0, "width", 0);
    std::string fill = name == "zfill" ? "0" : " ";
    if (const Value* f = a.arg(1, "fillchar"); f && f->is_string()) fill = f->str();
    int64_t len = static_cast<int64_t>(utf8_decode(s).size());
    if (width <= len) return Value(s);
    int64_t pad = width - len;
    auto rep = [&](int64_t n) {
      std::string o;
      for (int64_t k = 0; k < n; ++k) o += fill;
      return o;
    };
    if (name == "ljust") return Value(s + rep(pad));
    if (name == "rjust") return Value(rep(pad) + s);
    if (name == "zfill") {
      if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value(s.substr(0, 1) + rep(pad) + s.substr(1));
      return Value(rep(pad) + s);
    }
    int64_t left = pad / 2 + (pad & width & 1);
    return Value(rep(left) + s + rep(pad - left));
  }
  throw TemplateError("'str' object has no attribute '" + name + "'");
}

const std::unordered_set<std::string> kStringMethods = {
    "strip",     "lstrip",  "rstrip",   "split",   "rsplit",     "splitlines", "startswith",   "endswith",
    "upper",     "lower",   "casefold", "title",   "capitalize", "swapcase",   "replace",      "find",
    "rfind",     "index",   "rindex",   "count",   "join",       "format",     "isdigit",      "isnumeric",
    "isdecimal", "isalpha", "isalnum",  "isspace", "islower",    "isupper",    "removeprefix", "removesuffix",
    "zfill",     "center",  "ljust",    "rjust",   "partition",  "rpartition"};
const std::unordered_set<std::string> kUnsafeDict = {"pop", "popitem", "setdefault", "update", "clear"};
const std::unordered_set<std::string> kUnsafeList = {"append", "extend",  "insert", "pop",
                                                     "remove", "reverse", "sort",   "clear"};

Value dict_method(const Value& self, const std::string& name, CallArgs& a) {
  const auto& items = self.dict()->items;
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : items) out.push_back(make_list({k, v}, true));
    return make_iter(std::move(out), "dict_items");
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : items) out.push_back(name == "keys" ? k : v);
    return make_iter(std::move(out), name == "keys" ? "dict_keys" : "dict_values");
  }
  if (name == "get") {
    const Value* key = a.arg(0, "key");
    if (!key) throw TemplateError("get expected at least 1 argument, got 0");
    const Value* v = self.dict()->find(*key);
    if (v) return *v;
    const Value* def = a.arg(1, "default");
    return def ? *def : Value::none();
  }
  // copy
  auto d = std::make_shared<Dict>(*self.dict());
  return Value(d);
}

Value list_method(const Value& self, const std::string& name, CallArgs& a) {
  const auto& items = self.list()->items;
  const Value* x = a.arg(0, "value");
  if (name == "copy") return make_list(items, self.list()->tuple);
  if (!x) throw TemplateError(name + "() takes exactly one argument");
  if (name == "count") {
    int64_t n = 0;
    for (const auto& v : items) n += v.equals(*x);
    return Value(n);
  }
  for (size_t k = 0; k < items.size(); ++k)
    if (items[k].equals(*x)) return Value(static_cast<int64_t>(k));
  throw TemplateError(x->repr() + " is not in list");
}

}  // namespace

Value find_method(const Value& self, const std::string& name, bool* found) {
  *found = true;
  if (self.is_string() && kStringMethods.count(name)) {
    std::string s = self.str();
    return make_function(name, [s, name](CallArgs& a) { return string_method(s, name, a); });
  }
  if (self.is_mapping()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy")
      return make_function(name, [self, name](CallArgs& a) { return dict_method(self, name, a); });
    if (kUnsafeDict.count(name)) return unsafe(self, name);
  }
  if (self.is_seq()) {
    if (name == "index" || name == "count" || (name == "copy" && !self.list()->tuple))
      return make_function(name, [self, name](CallArgs& a) { return list_method(self, name, a); });
    if (!self.list()->tuple && kUnsafeList.count(name)) return unsafe(self, name);
  }
  *found = false;
  return Value();
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<char32_t> set;
  bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) {
    if (!chars.is_string()) throw TemplateError("strip arg must be None or str");
    set = utf8_decode(chars.str());
  }
  auto strip_it = [&](char32_t c) {
    return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(cps, b, e);
}

std::string py_upper(const std::string& s) {
  return map_cps(s, to_upper);
}
std::string py_lower(const std::string& s) {
  return map_cps(s, to_lower);
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    utf8_append(out, prev_cased ? to_lower(c) : to_title(c));
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k) utf8_append(out, k == 0 ? to_title(cps[k]) : to_lower(cps[k]));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  if (old.empty()) {
    // Python inserts repl between every character (and at both ends).
    auto cps = utf8_decode(s);
    std::string out;
    int64_t n = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  for (size_t p = s.find(old); p != std::string::npos && (count < 0 || n < count); p = s.find(old, pos)) {
    out.append(s, pos, p - pos);
    out += repl;
    pos = p + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    auto cps = utf8_decode(s);
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        size_t e = cps.size();
        while (e > k && is_py_space(cps[e - 1])) --e;
        parts.push_back(utf8_encode(cps, k, e));
        break;
      }
      size_t b = k;
      while (k < cps.size() && !is_py_space(cps[k])) ++k;
      parts.push_back(utf8_encode(cps, b, k));
    }
    return parts;
  }
  if (!sep.is_string()) throw TemplateError("must be str or None, not " + sep.type_name());
  const std::string& d = sep.str();
  if (d.empty()) throw TemplateError("empty separator");
  size_t pos = 0;
  for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, pos)) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) break;
    parts.push_back(s.substr(pos, p - pos));
    pos = p + d.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

}  // namespace tf::jinja
