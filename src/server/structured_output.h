#pragma once
// Structured outputs: OpenAI's response_format (chat; completions as in vLLM) and the Responses API's
// text.format, read into the engine's compiled JSON Schema (grammar-constrained sampling, engine/json_*).
#include <memory>
#include <string>

#include "server/json_fields.h"

namespace tf {
class JsonSchema;
}

namespace tf::server {

// `fmt`: the format object; `path`: its name in errors ("response_format", "text.format"). Chat nests the
// schema ({"type": "json_schema", "json_schema": {"name", "schema", "strict"}}); Responses flattens it
// ({"type": "json_schema", "name", "schema", "strict"}): `nested` tells which. "text" gives null,
// "json_object" any JSON object, "json_schema" its schema (none: any JSON value). A schema outside the
// supported subset, or another type, is a 400 that says what is not supported.
std::shared_ptr<const JsonSchema> read_response_format(const RequestJson& fmt, const std::string& path,
                                                       bool nested);

// All the ways chat and completions requests constrain the reply: response_format (OpenAI; llama.cpp's
// {"type": "json_object", "schema"} too) and vLLM's guided_json (a schema object or its JSON text),
// guided_regex (free text the regex matches whole) and guided_choice (exactly one of the strings). At most
// one may be given (400 otherwise). Null: free text.
std::shared_ptr<const JsonSchema> read_json_constraint(const JsonFields& f);

}  // namespace tf::server
