#include "server/http_reply.h"

#include "server/sse.h"

namespace tf::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_api_error(httplib::Response& res, const ApiError& e, const nlohmann::json& body) {
  if (e.status() == 429) res.set_header("Retry-After", "1");  // the wait queue is full: retry shortly
  send_json(res, e.status(), body);
}

}  // namespace tf::server
