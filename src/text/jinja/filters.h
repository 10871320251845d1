#pragma once
// jinja2's builtin filters (with transformers' tojson override) and tests.
#include <string>

#include "text/jinja/value.h"

namespace tf::jinja {

// Throws TemplateError("no filter named ...") for unknown filters.
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);

}  // namespace tf::jinja
