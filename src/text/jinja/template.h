#pragma once
// A parsed Jinja template: parse once, render many times from any thread.
#include <memory>
#include <string>

#include "text/jinja/ast.h"
#include "text/jinja/evaluator.h"

namespace tf::jinja {

class Template {
 public:
  // Throws TemplateError("line N: ...") on a syntax error or an unsupported tag.
  explicit Template(const std::string& source);
  // Throws TemplateError("line N: ...") when rendering fails (including raise_exception).
  std::string render(const Vars& vars) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace tf::jinja
