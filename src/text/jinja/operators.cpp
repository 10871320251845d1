#include "text/jinja/operators.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "text/jinja/methods.h"

namespace tf::jinja {

void raise_undefined(const Value& u) {
  throw TemplateError(u.undefined_hint().empty() ? "value is undefined" : u.undefined_hint());
}

static void check_defined(const Value& v) {
  if (v.is_undefined()) raise_undefined(v);
}

[[noreturn]] static void type_error(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                      b.type_name() + "'");
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

static Value repeat(const Value& seq, int64_t n) {
  size_t unit = seq.is_string() ? seq.str().size() : seq.is_list() ? seq.list()->items.size() : 0;
  if (n > 0 && unit > 0 && static_cast<uint64_t>(n) > (size_t{1} << 28) / unit)
    throw TemplateError("repetition result too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.str();
    return seq.is_safe() ? Value::markup(out) : Value(out);
  }
  if (!seq.is_seq())
    throw TemplateError("unsupported operand type(s) for *: '" + seq.type_name() + "' and 'int'");
  std::vector<Value> items;
  for (int64_t k = 0; k < n; ++k)
    for (const auto& v : seq.list()->items) items.push_back(v);
  return make_list(std::move(items), seq.list()->tuple);
}

// Python ints never overflow; ours are 64-bit, so overflow is reported instead of wrapping.
static Value checked(bool overflow, int64_t r) {
  if (overflow) throw TemplateError("integer overflow (values beyond 64 bits are not supported)");
  return Value(r);
}

static Value arith(const std::string& op, const Value& a, const Value& b) {
  bool ints = !a.is_float() && !b.is_float();
  if (ints && (op == "+" || op == "-" || op == "*")) {
    int64_t r = 0;
    bool overflow = op == "+"   ? __builtin_add_overflow(a.as_int(), b.as_int(), &r)
                    : op == "-" ? __builtin_sub_overflow(a.as_int(), b.as_int(), &r)
                                : __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
    return checked(overflow, r);
  }
  if (op == "+") return Value(a.as_double() + b.as_double());
  if (op == "-") return Value(a.as_double() - b.as_double());
  if (op == "*") return Value(a.as_double() * b.as_double());
  if (op == "/") {
    if (b.as_double() == 0) throw TemplateError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0)
      throw TemplateError(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      if (a.as_int() == INT64_MIN && b.as_int() == -1) checked(true, 0);
      int64_t q = floor_div(a.as_int(), b.as_int());
      return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
    }
    double x = a.as_double(), y = b.as_double();
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return op == "//" ? Value(std::floor(x / y)) : Value(m);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), p = 1;
      if (base == 0 || base == 1) return Value(e == 0 ? int64_t{1} : base);
      if (base == -1) return Value(e % 2 == 0 ? int64_t{1} : int64_t{-1});
      for (int64_t k = 0; k < e; ++k)  // |base| >= 2 overflows within 64 steps
        if (__builtin_mul_overflow(p, base, &p)) checked(true, 0);
      return Value(p);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  type_error(op, a, b);
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.to_str() + b.to_str());
  check_defined(a);
  check_defined(b);
  if (a.is_number() && b.is_number()) return arith(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (!a.is_safe() && !b.is_safe()) return Value(a.str() + b.str());
      return Value::markup((a.is_safe() ? a.str() : html_escape(a.str())) +
                           (b.is_safe() ? b.str() : html_escape(b.str())));
    }
    if (a.is_seq() && b.is_seq() && a.list()->tuple == b.list()->tuple) {
      std::vector<Value> items = a.list()->items;
      items.insert(items.end(), b.list()->items.begin(), b.list()->items.end());
      return make_list(std::move(items), a.list()->tuple);
    }
  } else if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  } else if (op == "%" && a.is_string()) {
    return Value(percent_format(a.str(), b));
  }
  type_error(op, a, b);
}

Value unary_op(const std::string& op, const Value& a) {
  check_defined(a);
  if (!a.is_number()) throw TemplateError("bad operand type for unary " + op + ": '" + a.type_name() + "'");
  if (op == "+") return a.is_float() ? Value(a.as_double()) : Value(a.as_int());
  if (!a.is_float() && a.as_int() == INT64_MIN) checked(true, 0);
  return a.is_float() ? Value(-a.as_double()) : Value(-a.as_int());
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order equals code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list()->tuple == b.list()->tuple) {
    const auto &x = a.list()->items, &y = b.list()->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (x[k].equals(y[k])) continue;
      return compare_values(x[k], y[k]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  check_defined(a);
  check_defined(b);
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
                      "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is_string())
        throw TemplateError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const auto& v : container.list()->items)
        if (v.equals(item)) return true;
      return false;
    case Kind::kDict:
      return container.dict()->find(item) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  check_defined(obj);
  if (obj.is_dict() && obj.dict()->kind != DictKind::kDict) {
    const Value* v = obj.dict()->find(name);
    return v ? *v : Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
  bool found = false;
  Value m = find_method(obj, name, &found);
  if (found) return m;
  if (obj.is_mapping()) {
    const Value* v = obj.dict()->find(name);
    if (v) return *v;
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

static int64_t norm_index(int64_t i, size_t n) {
  return i < 0 ? i + static_cast<int64_t>(n) : i;
}

Value get_item(const Value& obj, const Value& key) {
  check_defined(obj);
  if (obj.is_dict()) {
    const Value* v = obj.dict()->find(key);
    if (v) return *v;
  } else if ((obj.is_seq() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    if (obj.is_list()) {
      const auto& items = obj.list()->items;
      int64_t i = norm_index(key.as_int(), items.size());
      if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[i];
    } else {
      auto cps = utf8_decode(obj.str());
      int64_t i = norm_index(key.as_int(), cps.size());
      if (i >= 0 && i < static_cast<int64_t>(cps.size())) return Value(utf8_encode(cps, i, i + 1));
    }
    return Value::undefined(obj.type_name() + " object has no element " + key.to_str());
  }
  if (key.is_string()) {
    bool found = false;
    Value m = find_method(obj, key.str(), &found);
    if (found) return m;
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
}

// Python slice index resolution (PySlice_AdjustIndices).
static std::vector<size_t> slice_indices(size_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      throw TemplateError(std::string("slice ") + what + " must be an integer");
    return v.as_int();
  };
  int64_t st = as_opt(step, "step").value_or(1);
  if (st == 0) throw TemplateError("slice step cannot be zero");
  int64_t len = static_cast<int64_t>(n);
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t i = *v;
    if (i < 0) {
      i += len;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= len) {
      i = st < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t b = adjust(as_opt(start, "start"), st < 0 ? len - 1 : 0);
  int64_t e = adjust(as_opt(stop, "stop"), st < 0 ? -1 : len);
  std::vector<size_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(static_cast<size_t>(i));
  return idx;
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  check_defined(obj);
  if (obj.is_string()) {
    auto cps = utf8_decode(obj.str());
    std::string out;
    for (size_t i : slice_indices(cps.size(), start, stop, step)) utf8_append(out, cps[i]);
    return Value(out);
  }
  if (obj.is_seq()) {
    std::vector<Value> items;
    for (size_t i : slice_indices(obj.list()->items.size(), start, stop, step))
      items.push_back(obj.list()->items[i]);
    return make_list(std::move(items), obj.list()->tuple);
  }
  throw TemplateError("'" + obj.type_name() + "' object is not subscriptable");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      return v.list()->items;
    case Kind::kDict: {
      if (v.dict()->kind != DictKind::kDict) break;
      std::vector<Value> keys;
      for (const auto& kv : v.dict()->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.str())) {
        std::string s;
        utf8_append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default:
      break;
  }
  throw TemplateError("'" + v.type_name() + "' object is not iterable");
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> list =
      args.is_list() && args.list()->tuple ? args.list()->items : std::vector<Value>{args};
  std::string out;
  size_t next = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) throw TemplateError("incomplete format");
    std::string spec = "%";
    while (k < fmt.size() && std::string("-+ #0123456789.").find(fmt[k]) != std::string::npos)
      spec += fmt[k++];
    if (k >= fmt.size()) throw TemplateError("incomplete format");
    char conv = fmt[k];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= list.size()) throw TemplateError("not enough arguments for format string");
    const Value& v = list[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? v.to_str() : v.repr();
      std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
      out += spec == "%" ? s : std::string(buf);
    } else if (conv == 'd' || conv == 'i') {
      if (!v.is_number()) throw TemplateError("%d format: a real number is required, not " + v.type_name());
      std::snprintf(buf, sizeof(buf), (spec + "lld").c_str(),
                    static_cast<long long>(v.is_float() ? std::trunc(v.as_double()) : v.as_int()));
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g' || conv == 'x' || conv == 'X') {
      if (!v.is_number()) throw TemplateError("format requires a number, not " + v.type_name());
      if (conv == 'x' || conv == 'X')
        std::snprintf(buf, sizeof(buf), (spec + "ll" + conv).c_str(), static_cast<long long>(v.as_int()));
      else
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_double());
      out += buf;
    } else {
      throw TemplateError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < list.size() && !(list.size() == 1 && list[0].is_mapping()))
    throw TemplateError("not all arguments converted during string formatting");
  return out;
}

}  // namespace tf::jinja
