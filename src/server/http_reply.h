#pragma once
// Writing JSON replies and API errors on an httplib response, shared by every route.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/api_context.h"
#include "server/errors.h"
#include "server/options.h"

namespace tf::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body);
// An API error with `body` in the route's own API format; 429 also says when to retry. Its message goes
// into the request's log record (request_log.h).
void send_api_error(httplib::Response& res, const ApiError& e, const nlohmann::json& body);

// Constant-time comparison, so response timing does not reveal how much of a key matched.
bool same_key(const std::string& a, const std::string& b);
// OpenAI-style auth: `Authorization: Bearer KEY` with a key of opt.api_keys (nothing when none are set).
void check_bearer(const httplib::Request& req, const ServerOptions& opt);

// A route of an API registered beside the main OpenAI ones: refused while shutting down, `auth` first,
// and any exception answered as an API error in that API's own format (`error_json`).
template <class Auth, class ErrorJson, class Handler>
auto guarded_route(const ApiContext* ctx, Auth auth, ErrorJson error_json, Handler handler) {
  return [ctx, auth, error_json, handler](const httplib::Request& req, httplib::Response& res) {
    try {
      if (ctx->shutting_down) throw shutting_down();
      auth(req, ctx->options);
      handler(req, res);
    } catch (const std::exception& e) {
      const ApiError err = to_api_error(e);
      send_api_error(res, err, error_json(err));
    }
  };
}

}  // namespace tf::server
