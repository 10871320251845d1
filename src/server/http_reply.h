#pragma once
// Writing JSON replies and API errors on an httplib response, shared by every route.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/errors.h"

namespace tf::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body);
// An API error with `body` in the route's own API format; 429 also says when to retry.
void send_api_error(httplib::Response& res, const ApiError& e, const nlohmann::json& body);

}  // namespace tf::server
