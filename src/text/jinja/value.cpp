#include "text/jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/tok_text.h"

namespace tf::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value::Value(bool b) : kind_(Kind::kBool), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double f) : kind_(Kind::kFloat), f_(f) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}
Value::Value(ListPtr l) : kind_(Kind::kList), list_(std::move(l)) {}
Value::Value(DictPtr d) : kind_(Kind::kDict), dict_(std::move(d)) {}
Value::Value(FunctionPtr f) : kind_(Kind::kFunction), fn_(std::move(f)) {}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.safe_ = true;
  return v;
}

bool Value::is_seq() const {
  return kind_ == Kind::kList && list_->iter.empty();
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool Value::is_mapping() const {
  return kind_ == Kind::kDict && dict_->kind == DictKind::kDict;
}

double Value::as_double() const {
  return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return (!list_->iter.empty() && list_->iter.rfind("dict_", 0) != 0) || !list_->items.empty();
    case Kind::kDict:
      return dict_->kind != DictKind::kDict || !dict_->items.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return !list_->iter.empty() ? list_->iter : list_->tuple ? "tuple" : "list";
    case Kind::kDict:
      return dict_->kind == DictKind::kDict        ? "dict"
             : dict_->kind == DictKind::kNamespace ? "Namespace"
                                                   : "LoopContext";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t k = 0; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {  // Python repr uses fixed notation for 1e-4 <= |f| < 1e16
    int point = exp + 1;            // digits before the decimal point
    if (point <= 0) {
      out = "0." + std::string(-point, '0') + digits;
    } else if (point >= static_cast<int>(digits.size())) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

void utf8_append(std::string& out, char32_t cp) {
  tok::append_utf8(out, cp);
}

std::vector<char32_t> utf8_decode(const std::string& s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  end = std::min(end, cps.size());
  for (size_t k = begin; k < end; ++k) utf8_append(out, cps[k]);
  return out;
}

bool is_py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

static bool is_py_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x80) return c > 0x20 && c < 0x7f;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!is_py_printable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += q;
  return out;
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kString:
      return string_repr(s_);
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kList: {
      if (list_->iter == "generator" || list_->iter == "list_reverseiterator")
        return "<" + list_->iter + " object>";
      if (!list_->iter.empty()) {
        auto plain = std::make_shared<List>(*list_);
        plain->iter.clear();
        return list_->iter + "(" + Value(plain).repr() + ")";
      }
      std::string out(1, list_->tuple ? '(' : '[');
      for (size_t k = 0; k < list_->items.size(); ++k) {
        if (k) out += ", ";
        out += list_->items[k].repr();
      }
      if (list_->tuple && list_->items.size() == 1) out += ',';
      out += list_->tuple ? ')' : ']';
      return out;
    }
    case Kind::kDict: {
      if (dict_->kind == DictKind::kLoop) return "<LoopContext>";
      std::string out = "{";
      for (size_t k = 0; k < dict_->items.size(); ++k) {
        if (k) out += ", ";
        out += dict_->items[k].first.repr() + ": " + dict_->items[k].second.repr();
      }
      out += "}";
      return dict_->kind == DictKind::kNamespace ? "<Namespace " + out + ">" : out;
    }
    default:
      return to_str();
  }
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return float_repr(f_);
    case Kind::kString:
      return s_;
    case Kind::kFunction:
      return "<function " + fn_->name + ">";
    default:
      return repr();
  }
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_double() == o.as_double();
    return i_ == o.i_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return s_ == o.s_;
    case Kind::kList: {
      if (list_->tuple != o.list_->tuple || list_->items.size() != o.list_->items.size()) return false;
      if (!list_->iter.empty() || !o.list_->iter.empty()) return list_ == o.list_;
      for (size_t k = 0; k < list_->items.size(); ++k)
        if (!list_->items[k].equals(o.list_->items[k])) return false;
      return true;
    }
    case Kind::kDict: {
      if (dict_ == o.dict_) return true;
      if (dict_->kind != DictKind::kDict || o.dict_->kind != DictKind::kDict) return false;
      if (dict_->items.size() != o.dict_->items.size()) return false;
      for (const auto& [k, v] : dict_->items) {
        const Value* ov = o.dict_->find(k);
        if (!ov || !v.equals(*ov)) return false;
      }
      return true;
    }
    case Kind::kFunction:
      return fn_ == o.fn_;
    default:
      return false;
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (k.equals(key)) return &v;
  return nullptr;
}
const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}
void Dict::set(const Value& key, Value v) {
  for (auto& [k, old] : items) {
    if (k.equals(key)) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

Value make_list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(l);
}
Value make_iter(std::vector<Value> items, std::string kind) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->iter = std::move(kind);
  return Value(l);
}
Value make_dict() {
  return Value(std::make_shared<Dict>());
}
const Value* CallArgs::arg(size_t idx, const char* name) const {
  if (idx < pos.size()) return &pos[idx];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value make_function(std::string name, std::function<Value(CallArgs&)> fn) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->fn = std::move(fn);
  return Value(f);
}

// Request JSON can nest arbitrarily; the interpreter recurses over values, so refuse absurd depths.
constexpr int kMaxJsonDepth = 256;

template <typename J>
static Value from_json_impl(const J& j, int depth = 0) {
  if (depth > kMaxJsonDepth) throw TemplateError("JSON input nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      if (j.template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw TemplateError("integer beyond 64 bits in JSON input");
      return Value(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      for (const auto& e : j) items.push_back(from_json_impl(e, depth + 1));
      return make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it)
        d->items.emplace_back(Value(it.key()), from_json_impl(it.value(), depth + 1));
      return Value(d);
    }
    default:
      return Value::none();
  }
}
Value from_json(const nlohmann::ordered_json& j) {
  return from_json_impl(j);
}
Value from_json(const nlohmann::json& j) {
  return from_json_impl(j);
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c > 0x7e && c < 0x10000)) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else if (ensure_ascii && c >= 0x10000) {
          char32_t v = c - 0x10000;
          std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                        static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          out += buf;
        } else {
          utf8_append(out, c);
        }
      }
    }
  }
  out += '"';
}

static std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return float_repr(f);
}

static std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::kString:
      return k.str();
    case Kind::kBool:
      return k.as_bool() ? "true" : "false";
    case Kind::kNone:
      return "null";
    case Kind::kInt:
      return std::to_string(k.as_int());
    case Kind::kFloat:
      return json_float(k.as_double());
    default:
      throw TemplateError("keys must be str, int, float, bool or None, not " + k.type_name());
  }
}

static void json_dump(std::string& out, const Value& v, const JsonDumpOptions& opt, int depth) {
  auto newline = [&](int d) {
    if (!opt.has_indent) return;
    out += '\n';
    for (int k = 0; k < d; ++k) out += opt.indent_str;
  };
  switch (v.kind()) {
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Kind::kFloat:
      out += json_float(v.as_double());
      return;
    case Kind::kString:
      json_string(out, v.str(), opt.ensure_ascii);
      return;
    case Kind::kList: {
      if (!v.is_seq()) break;
      const auto& items = v.list()->items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += opt.item_sep;
        newline(depth + 1);
        json_dump(out, items[k], opt, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (!v.is_mapping()) break;
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, val] : v.dict()->items) items.emplace_back(json_key(k), &val);
      if (opt.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += opt.item_sep;
        newline(depth + 1);
        json_string(out, items[k].first, opt.ensure_ascii);
        out += opt.key_sep;
        json_dump(out, *items[k].second, opt, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
}

std::string json_dumps(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  json_dump(out, v, opt, 0);
  return out;
}

}  // namespace tf::jinja
