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
  if (type == "json_object" && !f.has("schema")) return JsonSchema::any_object();
  if (type != "json_schema" && type != "json_object") {
    throw invalid_field(f.name("type"),
                        "Invalid value for '" + f.name("type") + "': '" + type +
                            "' (supported: 'text', 'json_object', 'json_schema').",
                        "invalid_value");
  }
  const RequestJson* holder = &fmt;
  std::string at = path;
  if (nested && type == "json_schema") {  // llama.cpp's {"type": "json_object", "schema"} is flat
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

std::shared_ptr<const JsonSchema> read_json_constraint(const JsonFields& f) {
  const RequestJson* rf = f.object("response_format");
  const RequestJson* guided = f.get("guided_json");
  if (rf && guided) {
    throw invalid_field(f.name("guided_json"), "Give either 'response_format' or 'guided_json', not both.",
                        "invalid_value");
  }
  if (rf) return read_response_format(*rf, f.name("response_format"), true);
  if (!guided) return nullptr;
  RequestJson schema = *guided;
  if (guided->is_string()) {
    schema = RequestJson::parse(guided->get<std::string>(), nullptr, false);
    if (schema.is_discarded()) {
      throw invalid_field(f.name("guided_json"), "'guided_json' is a string that is not JSON.", "invalid_value");
    }
  }
  if (!schema.is_object() && !schema.is_boolean()) {
    throw invalid_field(f.name("guided_json"), "'guided_json' must be a JSON Schema (an object).", "invalid_type");
  }
  try {
    return JsonSchema::compile(schema);
  } catch (const InvalidRequest& e) {
    throw invalid_field(f.name("guided_json"), std::string("Unsupported JSON schema: ") + e.what(), "invalid_value");
  }
}

}  // namespace tf::server
