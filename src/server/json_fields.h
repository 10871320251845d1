#pragma once
// Typed access to the fields of a request object. Requests are parsed as ordered_json: chat templates
// dump tools and arguments with tojson, and Python (transformers, vLLM) keeps the request's key order. A
// field that is absent or null reads as "not given"; a field of the wrong type or out of range is a 400 that
// names it (with its path, e.g. "messages[2].role").
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>

namespace tf::server {

using RequestJson = nlohmann::ordered_json;

class JsonFields {
 public:
  // `obj` must outlive this; `path` prefixes the field names in errors ("" at the top level).
  JsonFields(const RequestJson& obj, std::string path = {});

  bool has(const std::string& key) const;  // present and not null
  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  std::optional<double> number(const std::string& key, double lo, double hi) const;
  std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi) const;
  std::optional<bool> boolean(const std::string& key) const;
  std::optional<std::string> string(const std::string& key) const;
  const RequestJson* object(const std::string& key) const;  // null when not given
  const RequestJson* array(const std::string& key) const;
  const RequestJson* get(const std::string& key) const;  // any type; null when not given

 private:
  const RequestJson& obj_;
  std::string path_;
};

// The path of an array's element in errors: ("messages", 2) -> "messages[2]".
std::string element_path(const std::string& array_path, size_t i);

// "a JSON object", "a string", ... for messages like "expected a string, got an array".
std::string json_type_name(const RequestJson& v);

// Objects and arrays nested deeper than this in a request body, or in JSON text a request or a reply carries
// (tool-call arguments, guided_json), are refused: such values recurse once a level when copied or printed,
// and a 4 MB body of nested objects overflowed a worker thread's stack (session 43's fuzzing). No real
// request comes near it (chat templates take 256 levels, JSON schemas 128, each with its own error).
constexpr int kMaxJsonNesting = 512;
// Whether `text` nests objects and arrays deeper than kMaxJsonNesting (strings skipped; one linear scan).
bool json_too_deep(const std::string& text);
// JSON text as a RequestJson, in time linear in the text (nlohmann's own ordered_json parse is quadratic in
// one object's keys); discarded (is_discarded()) on a syntax error or when json_too_deep.
RequestJson parse_request_json(const std::string& text);
// The same for any nlohmann JSON type (its own parse where keys are not ordered), without exceptions.
template <class Json>
Json parse_json_bounded(const std::string& text) {
  if constexpr (std::is_same_v<Json, RequestJson>) {
    return parse_request_json(text);
  } else {
    return json_too_deep(text) ? Json(Json::value_t::discarded) : Json::parse(text, nullptr, false);
  }
}

// Parses a request body; throws a 400 (malformed JSON, nested deeper than kMaxJsonNesting, not an object).
RequestJson parse_body(const std::string& body);

}  // namespace tf::server
