#pragma once
// Tree-walking interpreter: renders a parsed template with jinja2's scoping (loop bodies and macros get
// their own scope, `if` does not), loop objects, macros with caller, and transformers' globals.
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"

namespace tf::jinja {

using Vars = std::vector<std::pair<std::string, Value>>;

// Renders `body` with `vars` as the template context (over the globals range, dict, namespace,
// raise_exception, strftime_now). Throws TemplateError("line N: ...") on failure.
std::string render_body(const Body& body, const Vars& vars);

}  // namespace tf::jinja
