#pragma once
// Runtime values of the Jinja interpreter, modelled on the Python objects jinja2 sees when transformers
// renders a chat template: None, bool, int, float, str, list, tuple, dict (insertion ordered), jinja2's
// Undefined, Namespace, loop objects and callables. Printing follows Python's str()/repr() so that
// `{{ some_list }}` renders exactly as it does in Python.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tf::jinja {

class Value;
struct List;
struct Dict;
struct Function;
using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;
using FunctionPtr = std::shared_ptr<Function>;

// Raised by the template (raise_exception), by a failed operation, or by a sandbox violation. The
// interpreter adds the template line before it reaches the caller.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

// Arguments of a call: positional then keyword, in call order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  // Argument `idx` (0 = first after the input) by position or keyword; null when absent.
  const Value* arg(size_t idx, const char* name) const;
};

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(ListPtr l);
  Value(DictPtr d);
  Value(FunctionPtr f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }  // list, tuple, generator or dict view
  bool is_seq() const;                                   // a real list or tuple (len, index, tojson)
  bool is_dict() const { return kind_ == Kind::kDict; }  // dict, namespace or loop object
  bool is_mapping() const;                               // a real dict
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }  // bool and int
  double as_double() const;              // any number
  const std::string& str() const { return s_; }
  const ListPtr& list() const { return list_; }
  const DictPtr& dict() const { return dict_; }
  const FunctionPtr& function() const { return fn_; }
  const std::string& undefined_hint() const { return s_; }
  // Markup (a `|safe` or `|escape` string): `+` with a plain string escapes the plain one, as
  // markupsafe.Markup does in Python.
  bool is_safe() const { return safe_; }
  static Value markup(std::string s);

  bool truthy() const;
  std::string to_str() const;         // Python str(); Undefined prints ''
  std::string repr() const;           // Python repr()
  std::string type_name() const;      // Python type name, for error messages
  bool equals(const Value& o) const;  // Python ==

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool safe_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;  // string value, or the undefined hint
  ListPtr list_;
  DictPtr dict_;
  FunctionPtr fn_;
};

struct List {
  std::vector<Value> items;
  bool tuple = false;
  // Non-empty for lazy results: "generator" (map/select/... filters), "list_reverseiterator", "dict_items",
  // "dict_keys", "dict_values". They iterate like lists but json.dumps/len/indexing behave as in Python.
  std::string iter;
};

enum class DictKind { kDict, kNamespace, kLoop };

// Insertion-ordered mapping (Python dicts keep order; tojson and repr show it).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  DictKind kind = DictKind::kDict;
  FunctionPtr call;  // a recursive loop object is callable

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value v);
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

Value make_list(std::vector<Value> items, bool tuple = false);
Value make_iter(std::vector<Value> items, std::string kind = "generator");
std::string html_escape(const std::string& s);
Value make_dict();
Value make_function(std::string name, std::function<Value(CallArgs&)> fn);

// Python float repr (shortest round trip: 1.0, 0.1, 1e+16, 1e-05, inf, nan).
std::string float_repr(double f);
// Python repr of a str (quote choice and escapes as CPython does).
std::string string_repr(const std::string& s);

// JSON in and out. from_json keeps object key order of ordered_json input.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);
// Python json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
struct JsonDumpOptions {
  int indent = -1;         // -1: None
  std::string indent_str;  // used when indent was given as a string
  bool has_indent = false;
  std::string item_sep, key_sep;
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& opt);

// UTF-8 helpers used by string operations (Python indexes strings by code point).
std::vector<char32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
void utf8_append(std::string& out, char32_t cp);
bool is_py_space(char32_t c);

}  // namespace tf::jinja
