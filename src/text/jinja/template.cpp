#include "text/jinja/template.h"

#include "text/jinja/parser.h"

namespace tf::jinja {

static Body parse_checked(const std::string& source) {
  try {
    return parse_template(source);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::exception& e) {  // e.g. an integer literal beyond 64 bits
    throw TemplateError(std::string("invalid template: ") + e.what());
  }
}

Template::Template(const std::string& source) : body_(std::make_shared<Body>(parse_checked(source))) {}

std::string Template::render(const Vars& vars) const {
  return render_body(*body_, vars);
}

}  // namespace tf::jinja
