#include "server/http_reply.h"

#include <algorithm>

#include "server/request_log.h"
#include "server/sse.h"

namespace tf::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_api_error(httplib::Response& res, const ApiError& e, const nlohmann::json& body) {
  request_record().error = e.message();
  if (e.status() == 429) res.set_header("Retry-After", "1");  // the wait queue is full: retry shortly
  send_json(res, e.status(), body);
}

bool same_key(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
  return diff == 0;
}

void check_bearer(const httplib::Request& req, const ServerOptions& opt) {
  if (opt.api_keys.empty()) return;
  const std::string h = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (h.empty()) throw invalid_api_key(true);
  if (h.compare(0, bearer.size(), bearer) != 0) throw invalid_api_key(false);
  const std::string key = h.substr(bearer.size());
  bool ok = false;
  for (const auto& k : opt.api_keys) ok |= same_key(key, k);
  if (!ok) throw invalid_api_key(false);
}

}  // namespace tf::server
