#include "text/jinja/tests.h"

#include <cmath>

#include "text/jinja/methods.h"
#include "text/jinja/operators.h"

namespace tf::jinja {

static const Value& test_arg(const CallArgs& a, const std::string& test) {
  if (a.pos.empty()) {
    if (!a.kw.empty()) return a.kw[0].second;
    throw TemplateError("test '" + test + "' needs an argument");
  }
  return a.pos[0];
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_mapping();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_seq() || v.is_mapping();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "odd" || name == "even") {
    if (!v.is_int() && !v.is_bool()) {
      if (v.is_undefined()) raise_undefined(v);
      throw TemplateError("unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
    }
    int64_t r = ((v.as_int() % 2) + 2) % 2;
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "divisibleby") {
    Value m = binary_op("%", v, test_arg(a, name));
    return m.as_double() == 0;
  }
  if (name == "lower" || name == "upper") {
    std::string s = v.to_str();
    return name == "lower" ? py_lower(s) == s : py_upper(s) == s;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.equals(test_arg(a, name));
  if (name == "ne" || name == "!=") return !v.equals(test_arg(a, name));
  if (name == "lt" || name == "lessthan" || name == "<") return compare_values(v, test_arg(a, name)) < 0;
  if (name == "le" || name == "<=") return compare_values(v, test_arg(a, name)) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_values(v, test_arg(a, name)) > 0;
  if (name == "ge" || name == ">=") return compare_values(v, test_arg(a, name)) >= 0;
  if (name == "in") return contains(test_arg(a, name), v);
  if (name == "sameas") {
    const Value& o = test_arg(a, name);
    if (v.kind() != o.kind()) return false;
    if (v.is_list()) return v.list() == o.list();
    if (v.is_dict()) return v.dict() == o.dict();
    if (v.is_string()) return false;  // distinct str objects; rarely meaningful in templates
    return v.equals(o);
  }
  throw TemplateError("no test named '" + name + "'");
}

}  // namespace tf::jinja
