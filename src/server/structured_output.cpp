#include "server/structured_output.h"

#include "core/error.h"
#include "engine/json_matcher.h"
#include "server/errors.h"

namespace tf::server {

std::shared_ptr<const JsonSchema> read_response_format(const RequestJson& fmt, const std::string& path,
                                                       bool nested) {
  JsonFields f(fmt, path);
  const std::string type = f.string("type").value_or("");
  if (type.empty())
    throw invalid_field(f.name("type"), "Missing required parameter: '" + f.name("type") + "'.");
  if (type == "text") return nullptr;
  if (type == "json_object") return JsonSchema::any_object();
  if (type != "json_schema") {
    throw invalid_field(f.name("type"),
                        "Invalid value for '" + f.name("type") + "': '" + type +
                            "' (supported: 'text', 'json_object', 'json_schema').",
                        "invalid_value");
  }
  const RequestJson* holder = &fmt;
  std::string at = path;
  if (nested) {
    holder = f.object("json_schema");
    at = f.name("json_schema");
    if (!holder) throw invalid_field(at, "Missing required parameter: '" + at + "'.");
  }
  JsonFields h(*holder, at);
  (void)h.string("name"), (void)h.string("description"), (void)h.boolean("strict");  // type-checked only
  const RequestJson* schema = h.get("schema");
  try {
    return JsonSchema::compile(schema ? *schema : RequestJson::object());
  } catch (const InvalidRequest& e) {
    throw invalid_field(h.name("schema"), std::string("Unsupported JSON schema: ") + e.what(),
                        "invalid_value");
  }
}

}  // namespace tf::server
