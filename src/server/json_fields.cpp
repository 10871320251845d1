#include "server/json_fields.h"

#include <algorithm>
#include <cmath>

#include "server/errors.h"

namespace tf::server {

JsonFields::JsonFields(const RequestJson& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

std::string element_path(const std::string& array_path, size_t i) {
  return array_path + "[" + std::to_string(i) + "]";
}

std::string json_type_name(const RequestJson& v) {
  switch (v.type()) {
    case RequestJson::value_t::null:
      return "null";
    case RequestJson::value_t::object:
      return "an object";
    case RequestJson::value_t::array:
      return "an array";
    case RequestJson::value_t::string:
      return "a string";
    case RequestJson::value_t::boolean:
      return "a boolean";
    case RequestJson::value_t::number_integer:
    case RequestJson::value_t::number_unsigned:
      return "an integer";
    case RequestJson::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

const RequestJson* JsonFields::get(const std::string& key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(const std::string& key) const {
  return get(key) != nullptr;
}

static ApiError wrong_type(const std::string& field, const char* expected, const RequestJson& got) {
  return invalid_field(
      field,
      "Invalid type for '" + field + "': expected " + expected + ", but got " + json_type_name(got) + ".",
      "invalid_type");
}

static std::string fmt(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

std::optional<double> JsonFields::number(const std::string& key, double lo, double hi) const {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw wrong_type(name(key), "a number", *v);
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    throw invalid_field(name(key),
                        "Invalid value for '" + name(key) + "': " + fmt(d) + " is outside [" + fmt(lo) +
                            ", " + fmt(hi) + "].",
                        "invalid_value");
  }
  return d;
}

std::optional<int64_t> JsonFields::integer(const std::string& key, int64_t lo, int64_t hi) const {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  int64_t i = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    i = u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
  } else if (v->is_number_integer()) {
    i = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e15) {
    i = int64_t(v->get<double>());  // 5.0 is accepted as 5, as Python clients may send it
  } else {
    throw wrong_type(name(key), "an integer", *v);
  }
  if (i < lo || i > hi) {
    throw invalid_field(name(key),
                        "Invalid value for '" + name(key) + "': " + std::to_string(i) + " is outside [" +
                            std::to_string(lo) + ", " + std::to_string(hi) + "].",
                        "invalid_value");
  }
  return i;
}

std::optional<bool> JsonFields::boolean(const std::string& key) const {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw wrong_type(name(key), "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> JsonFields::string(const std::string& key) const {
  const RequestJson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw wrong_type(name(key), "a string", *v);
  return v->get<std::string>();
}

const RequestJson* JsonFields::object(const std::string& key) const {
  const RequestJson* v = get(key);
  if (v && !v->is_object()) throw wrong_type(name(key), "an object", *v);
  return v;
}

const RequestJson* JsonFields::array(const std::string& key) const {
  const RequestJson* v = get(key);
  if (v && !v->is_array()) throw wrong_type(name(key), "an array", *v);
  return v;
}

bool json_too_deep(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonNesting) return true;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

RequestJson parse_body(const std::string& body) {
  if (json_too_deep(body))
    throw malformed_json("objects and arrays nest deeper than " + std::to_string(kMaxJsonNesting) +
                         " levels");
  RequestJson j = RequestJson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse to get the position of the error for the message.
    try {
      RequestJson again = RequestJson::parse(body);
    } catch (const RequestJson::parse_error& e) {
      throw malformed_json("error at byte " + std::to_string(e.byte));
    }
    throw malformed_json("invalid JSON");
  }
  if (!j.is_object()) throw malformed_json("expected a JSON object, got " + json_type_name(j));
  return j;
}

}  // namespace tf::server
