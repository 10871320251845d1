#pragma once
// jinja2's builtin tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...).
#include <string>

#include "text/jinja/value.h"

namespace tf::jinja {

// Throws TemplateError("no test named ...") for unknown tests.
bool apply_test(const std::string& name, const Value& input, CallArgs& args);

}  // namespace tf::jinja
