#include "server/structured_output.h"

#include "core/error.h"
#include "engine/json_matcher.h"
#include "server/errors.h"

namespace tf::server {

// make(), with the matcher's refusal (InvalidRequest: a keyword or construct outside the supported
// subset) as a 400 on `param`.
template <class Make>
static std::shared_ptr<const JsonSchema> or_400(const std::string& param, const char* what, Make make) {
  try {
    return make();
  } catch (const InvalidRequest& e) {
    throw invalid_field(param, std::string("Unsupported ") + what + ": " + e.what(), "invalid_value");
  }
}

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
  return or_400(h.name("schema"), "JSON schema",
                [&] { return JsonSchema::compile(schema ? *schema : RequestJson::object()); });
}

std::shared_ptr<const JsonSchema> read_json_constraint(const JsonFields& f) {
  const char* const kinds[] = {"response_format", "guided_json", "guided_regex", "guided_choice"};
  const char* given = nullptr;
  for (const char* k : kinds) {
    if (!f.has(k)) continue;
    if (given) {
      throw invalid_field(f.name(k), std::string("Give one of '") + given + "' and '" + k + "', not both.",
                          "invalid_value");
    }
    given = k;
  }
  if (!given) return nullptr;
  const std::string name = f.name(given);
  if (given == kinds[0]) return read_response_format(*f.object(given), name, true);
  if (given == kinds[2]) {
    const std::string pattern = *f.string(given);
    return or_400(name, "regex", [&] { return JsonSchema::text_regex(pattern); });
  }
  if (given == kinds[3]) {
    const RequestJson* list = f.array(given);
    std::vector<std::string> choices;
    for (const auto& c : *list) {
      if (!c.is_string() || c.get<std::string>().empty()) {
        throw invalid_field(name, "'" + name + "' must be a list of non-empty strings.", "invalid_value");
      }
      choices.push_back(c.get<std::string>());
    }
    return or_400(name, "choices", [&] { return JsonSchema::text_choice(choices); });
  }
  const RequestJson* guided = f.get(given);  // guided_json: a schema, or its JSON text
  RequestJson schema = *guided;
  if (guided->is_string()) {
    schema = parse_json_bounded<RequestJson>(guided->get<std::string>());
    if (schema.is_discarded())
      throw invalid_field(name, "'guided_json' is a string that is not JSON.", "invalid_value");
  }
  if (!schema.is_object() && !schema.is_boolean()) {
    throw invalid_field(name, "'guided_json' must be a JSON Schema (an object).", "invalid_type");
  }
  return or_400(name, "JSON schema", [&] { return JsonSchema::compile(schema); });
}

}  // namespace tf::server
