#include "text/jinja/template.h"

#include "text/jinja/parser.h"

namespace tf::jinja {

Template::Template(const std::string& source) : body_(std::make_shared<Body>(parse_template(source))) {}

std::string Template::render(const Vars& vars) const {
  return render_body(*body_, vars);
}

}  // namespace tf::jinja
