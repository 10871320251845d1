#pragma once
// OpenAI's error object: {"error": {"message", "type", "param", "code"}} with the HTTP status that goes
// with it. Every failure a handler can meet becomes one ApiError, so clients always get this shape.
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

namespace tf::server {

class ApiError : public std::exception {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = {}, std::string code = {})
      : status_(status),
        type_(std::move(type)),
        message_(std::move(message)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  const char* what() const noexcept override { return message_.c_str(); }
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

  nlohmann::json to_json() const;

 private:
  int status_;
  std::string type_, message_, param_, code_;
};

// 400 invalid_request_error naming the offending field (e.g. "messages[1].content").
ApiError invalid_field(const std::string& param, const std::string& message, const std::string& code = {});
// 400 for a body that is not a JSON object.
ApiError malformed_json(const std::string& detail);
// 404 model_not_found.
ApiError model_not_found(const std::string& model);
// 400 context_length_exceeded with the numbers.
ApiError context_length_exceeded(int prompt_tokens, int max_tokens, int context, const std::string& param);
// 401 invalid_api_key (missing or wrong bearer token).
ApiError invalid_api_key(bool missing);
// 413 for a body over the configured limit.
ApiError payload_too_large(size_t limit_bytes);
// 404 for an unknown route, 405 for a known route with the wrong method.
ApiError route_not_found(const std::string& method, const std::string& path);
// 500 for anything unexpected (an engine failure, a bug): never leaks as a dropped connection.
ApiError internal_error(const std::string& message);
// 503 while shutting down.
ApiError shutting_down();

// Maps any exception to an ApiError: ApiError as is, tf::InvalidRequest to 400 with its param/code,
// everything else to 500.
ApiError to_api_error(const std::exception& e);

}  // namespace tf::server
