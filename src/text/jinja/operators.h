#pragma once
// Python semantics of Jinja's operators on values: arithmetic, ordering, membership, attribute and item
// access (jinja2's getattr/getitem rules, with the sandbox's refusal of mutating methods).
#include <string>

#include "text/jinja/value.h"

namespace tf::jinja {

// op is one of + - * / // % ** ~
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);
// Python ordering: <0, 0, >0; throws TemplateError when the types are not orderable.
int compare_values(const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The elements a for loop (or list()) sees: list items, dict keys, string characters.
std::vector<Value> iterate(const Value& v);
// Python str % args (printf-style formatting).
std::string percent_format(const std::string& fmt, const Value& args);
[[noreturn]] void raise_undefined(const Value& u);

}  // namespace tf::jinja
