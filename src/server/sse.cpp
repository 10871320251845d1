#include "server/sse.h"

namespace tf::server {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& chunk) {
  return "data: " + dump_json(chunk) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

std::string sse_comment(const std::string& text) {
  return ": " + text + "\n\n";
}

}  // namespace tf::server
