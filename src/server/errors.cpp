#include "server/errors.h"

#include "core/error.h"

namespace tf::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json err = {{"message", message_}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
  if (!param_.empty()) err["param"] = param_;
  if (!code_.empty()) err["code"] = code_;
  return {{"error", err}};
}

ApiError invalid_field(const std::string& param, const std::string& message, const std::string& code) {
  return ApiError(400, "invalid_request_error", message, param, code);
}

ApiError malformed_json(const std::string& detail) {
  return ApiError(400, "invalid_request_error",
                  "We could not parse the JSON body of your request: " + detail +
                      ". The body must be a JSON object (Content-Type: application/json).",
                  {}, "invalid_json");
}

ApiError model_not_found(const std::string& model) {
  return ApiError(
      404, "invalid_request_error",
      "The model '" + model + "' does not exist on this server; GET /v1/models lists the ids it serves.",
      "model", "model_not_found");
}

ApiError context_length_exceeded(int prompt_tokens, int max_tokens, int context, const std::string& param) {
  std::string msg =
      "This model's maximum context length is " + std::to_string(context) + " tokens. However, you ";
  if (max_tokens > 0) {
    msg += "requested " + std::to_string(prompt_tokens + max_tokens) + " tokens (" +
           std::to_string(prompt_tokens) + " in the prompt, " + std::to_string(max_tokens) +
           " for the completion). ";
  } else {
    msg +=
        "sent a prompt of " + std::to_string(prompt_tokens) + " tokens, which leaves no room for a reply. ";
  }
  msg += "Please reduce the prompt or the completion length.";
  return ApiError(400, "invalid_request_error", msg, param, "context_length_exceeded");
}

ApiError invalid_api_key(bool missing) {
  if (missing) {
    return ApiError(401, "invalid_request_error",
                    "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.", {},
                    "invalid_api_key");
  }
  return ApiError(401, "invalid_request_error", "Incorrect API key provided.", {}, "invalid_api_key");
}

ApiError payload_too_large(size_t limit_bytes) {
  return ApiError(413, "invalid_request_error",
                  "The request body is larger than this server's limit of " + std::to_string(limit_bytes) +
                      " bytes (tensorfold serve --max-body-bytes).",
                  {}, "request_too_large");
}

ApiError route_not_found(const std::string& method, const std::string& path) {
  return ApiError(404, "invalid_request_error", "Unknown request URL: " + method + " " + path + ".", {},
                  "unknown_url");
}

ApiError internal_error(const std::string& message) {
  return ApiError(500, "server_error", "The server had an error while processing your request: " + message,
                  {}, {});
}

ApiError shutting_down() {
  return ApiError(503, "server_error", "The server is shutting down.", {}, "shutting_down");
}

ApiError to_api_error(const std::exception& e) {
  if (auto* api = dynamic_cast<const ApiError*>(&e)) return *api;
  if (auto* bad = dynamic_cast<const InvalidRequest*>(&e)) {
    return ApiError(400, "invalid_request_error", bad->what(), bad->param(), bad->code());
  }
  if (dynamic_cast<const Overloaded*>(&e))
    return ApiError(429, "rate_limit_error", e.what(), {}, "server_busy");
  return internal_error(e.what());
}

}  // namespace tf::server
