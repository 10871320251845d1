#include "server/json_fields.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>
#include <vector>

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

namespace {

// Builds a RequestJson from nlohmann's SAX events in time linear in the text. nlohmann's own parse of an
// ordered_json inserts each member after a linear search of the object's earlier keys (ordered_map is a
// vector): quadratic in one object's keys, and a body holding one object of 100k keys kept a worker busy
// for 60 s (session 43). Here each open object keeps a hash index of its keys; a repeated key keeps its
// first place and takes the last value, as nlohmann's parse does. Iterative: no recursion a level.
class OrderedBuilder {
 public:
  using J = RequestJson;
  bool null() { return put(J(nullptr)); }
  bool boolean(bool v) { return put(J(v)); }
  bool number_integer(J::number_integer_t v) { return put(J(v)); }
  bool number_unsigned(J::number_unsigned_t v) { return put(J(v)); }
  bool number_float(J::number_float_t v, const std::string&) { return put(J(v)); }
  bool string(J::string_t& v) { return put(J(std::move(v))); }
  bool binary(J::binary_t& v) { return put(J::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(J::object()); }
  bool key(J::string_t& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(J::array()); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    error_at = position;
    return false;
  }

  J root;
  std::size_t error_at = 0;

 private:
  struct Frame {
    J value;
    J::string_t key;                                 // objects: the member being read
    std::unordered_map<J::string_t, size_t> places;  // objects: each key's place
  };
  bool open(J v) {
    frames_.push_back(Frame{std::move(v), {}, {}});
    return true;
  }
  bool close() {
    J v = std::move(frames_.back().value);
    frames_.pop_back();
    return put(std::move(v));
  }
  bool put(J v) {
    if (frames_.empty()) {
      root = std::move(v);
      return true;
    }
    Frame& f = frames_.back();
    if (f.value.is_array()) {
      f.value.get_ref<J::array_t&>().push_back(std::move(v));
      return true;
    }
    J::object_t& members = f.value.get_ref<J::object_t&>();  // a vector of (key, value) pairs
    const auto [at, fresh] = f.places.try_emplace(f.key, members.size());
    if (fresh)
      members.emplace_back(std::move(f.key), std::move(v));
    else
      (members.begin() + std::ptrdiff_t(at->second))->second = std::move(v);
    return true;
  }
  std::vector<Frame> frames_;
};

// OrderedBuilder's parse of text already checked for depth: discarded on a syntax error, `error_at` its byte.
RequestJson parse_ordered(const std::string& text, size_t* error_at) {
  OrderedBuilder b;
  if (!RequestJson::sax_parse(text, &b)) {
    if (error_at) *error_at = b.error_at;
    return RequestJson(RequestJson::value_t::discarded);
  }
  return std::move(b.root);
}

}  // namespace

RequestJson parse_request_json(const std::string& text) {
  return json_too_deep(text) ? RequestJson(RequestJson::value_t::discarded) : parse_ordered(text, nullptr);
}

RequestJson parse_body(const std::string& body) {
  if (json_too_deep(body))
    throw malformed_json("objects and arrays nest deeper than " + std::to_string(kMaxJsonNesting) +
                         " levels");
  size_t error_at = 0;
  RequestJson j = parse_ordered(body, &error_at);
  if (j.is_discarded()) throw malformed_json("error at byte " + std::to_string(error_at));
  if (!j.is_object()) throw malformed_json("expected a JSON object, got " + json_type_name(j));
  return j;
}

}  // namespace tf::server
