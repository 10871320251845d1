#pragma once
// Recursive-descent parser with jinja2's grammar and operator precedence.
#include <string>

#include "text/jinja/ast.h"

namespace tf::jinja {

// Throws TemplateError("line N: ...") for syntax errors and unsupported tags.
Body parse_template(const std::string& source);

}  // namespace tf::jinja
