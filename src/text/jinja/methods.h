#pragma once
// Methods templates call on values: str (strip, split, startswith, format, ...), dict (items, get, ...)
// and list (index, count). Mutating methods are refused as jinja2's ImmutableSandboxedEnvironment does.
#include <string>

#include "text/jinja/value.h"

namespace tf::jinja {

// A bound method of `self`, or Undefined when the type has no such method (unsafe ones give an Undefined
// that raises SecurityError-like errors when called).
Value find_method(const Value& self, const std::string& name, bool* found);

// Python str methods shared with filters.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit);

}  // namespace tf::jinja
